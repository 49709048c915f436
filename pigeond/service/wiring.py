"""Wiring: one factory builds every layer from a :class:`Config` and a reactor into a
:class:`~pigeond.service.daemon.Daemon`; the composition root, apart from the running
daemon's own behaviour.

Nothing here touches the global reactor; the entry point passes it in, and
tests pass their own.
"""

from __future__ import annotations

import functools

from treq.client import HTTPClient
from twisted.application.service import MultiService
from twisted.internet.interfaces import IReactorFromThreads, IReactorTime
from twisted.web.client import HTTPConnectionPool

from pigeond.api.authority import SessionAuthority
from pigeond.api.flood import FloodGuard
from pigeond.api.policy import REFRESH_S, PolicyBook
from pigeond.api.routes import SwarmRoutes
from pigeond.api.target_check import TargetCheck
from pigeond.api.web import JsonApi, make_site
from pigeond.config import Config
from pigeond.delivery.arbiter import Arbiter
from pigeond.delivery.events import EventStream
from pigeond.delivery.member_doors import MemberDoors
from pigeond.delivery.metrics import DeliveryMetrics
from pigeond.delivery.permissions import PermissionWatch
from pigeond.delivery.policy import DeliveryPolicy
from pigeond.delivery.prompt_mode import AgentCatalog, ModeTracker
from pigeond.delivery.registry import SessionDirectoryRegistry
from pigeond.delivery.reminders import ReminderSweep
from pigeond.delivery.sweeper import ExpirySweeper
from pigeond.delivery.turns import TurnTracker
from pigeond.delivery.verifier import Verifier
from pigeond.service.brakes import conversation_brakes, person_prompts
from pigeond.service.daemon import Daemon
from pigeond.service.db_watch import DatabaseWatch
from pigeond.service.delivery_parts import DeliveryParts
from pigeond.service.job_service import JobService
from pigeond.service.members import (
    MemberLiveness,
    member_parts,
    tool_call_readers,
    turns_ended_of,
)
from pigeond.service.opencode_v2 import OpencodeV2Parts
from pigeond.service.parts import (
    access_policy,
    both,
    delivery_health_with_api,
    opencode_client,
)
from pigeond.service.pruner import Pruner
from pigeond.service.quiet import QuietGate, hurry_unless_quiet, on_change, unless_quiet
from pigeond.service.sender_proofs import accepted_then, sender_proof_job
from pigeond.service.shared_db import seen_status, shared_database_parts
from pigeond.service.side_routes import install_side_routes
from pigeond.service.ticker import Ticker
from pigeond.storage.database import Database, open_threaded


def build_daemon(
    config: Config,
    reactor: IReactorTime,
    http: HTTPClient | None = None,
    db: Database | None = None,
) -> Daemon:
    """Open and migrate the database (unless ``db`` is given: tests on a ``Clock`` pass an
    :class:`~pigeond.storage.database.InlineDatabase`) and wire the layers; listens on
    nothing yet.

    ``reactor`` is typed as the clock, what nearly every part takes; the few that need
    more of the real reactor (threads, TCP, listening) adapt it to the interface they
    need where they take it, as Twisted advises for what not every reactor provides."""
    if db is None:
        db = open_threaded(config.connect_db, IReactorFromThreads(reactor))
    db.configure(config)
    try:
        return _wire(config, reactor, http, db)
    except BaseException:
        db.close()
        raise


def _no_kick(target: str) -> None:
    """With delivery off nothing is handed off: a queued reminder waits for a daemon that
    delivers."""


def _wire(config: Config, reactor: IReactorTime, http: HTTPClient | None, db: Database) -> Daemon:
    jobs = MultiService()
    # its check runs first on the tick (below), so a deleted database is noticed first
    db_watch = DatabaseWatch(config.db, reactor, interval_s=None)  # on the ticker, below
    jobs.addService(JobService("db-watch", db_watch))
    # the gate's stat of the file is the database watch's check too: one stat, not two
    gate = QuietGate(
        db, reactor, config.db, lambda: int(config.turn_timeout_s * 1000), stat=db_watch.stat
    )
    pruner = Pruner(db, reactor, retention_days=config.retention_days, idle=lambda: gate.quiet)
    jobs.addService(JobService("pruner", pruner))
    # every periodic job on one tick, each skipping its reads while nothing can be due
    ticker = Ticker(reactor, config.tick_ms / 1000)
    jobs.addService(JobService("ticker", ticker))
    if not gate.watching:
        ticker.add("db-watch", db_watch.check)  # first, as said above
    ticker.add("quiet", gate.tick)  # first, with the check in its stat
    metrics = DeliveryMetrics()  # its registry also holds /metrics' gauges
    sweeper = ExpirySweeper(db, reactor)
    ticker.add("sweep", unless_quiet(gate, sweeper.sweep))
    arbiter: Arbiter | None = None
    events: EventStream | None = None
    pool: HTTPConnectionPool | None = None
    delivery: DeliveryParts | None = None
    members = member_parts(db, reactor)
    if config.arbiter_enabled:
        client, pool = opencode_client(config, reactor, http, members.reads)
        v2 = OpencodeV2Parts(config, client, reactor)  # the same URL, found to be a 2.x
        registry = SessionDirectoryRegistry(v2.lookup, reactor, config)
        reach = client.reachability  # an outage of opencode: everything waits for its end
        # probed every 2 s while anything is open (queued, to verify), else every 30 s
        reach.needed_while(lambda: not gate.quiet)
        ticker.add("probe-pace", functools.partial(hurry_unless_quiet, gate, reach))

        def opencode_down() -> bool:
            return reach.down

        turns = (
            TurnTracker(reactor, client, config, opencode_down=opencode_down)
            if config.delivery == "turn"
            else None
        )
        # each target's own agent and model, from the events and transcripts read anyway
        modes = ModeTracker(
            client, stream_connected=lambda: events is not None and events.connected
        )
        shared = shared_database_parts(config, reactor, db, registry)
        routing = None if shared is None else shared.routing
        permissions = PermissionWatch(
            db, v2.permissions, reactor, config, directory_of=registry.resolve,
            known_idle=lambda session: (turns is not None and turns.known_idle(session))
            or v2.events.known_idle(session),
            stream_connected=lambda: events is not None and events.connected,
            mine=None if routing is None else routing.mine, opencode_down=opencode_down,
        )  # fmt: skip
        if turns is not None:
            events = EventStream(
                client, reactor, seen_status(turns.observe, routing),
                both(turns.stream_state, permissions.stream_state),
                on_user_message=modes.observe, on_permission=permissions.observe, outages=reach,
            )  # fmt: skip
        arbiter = Arbiter(
            db, registry, client, reactor, policy=DeliveryPolicy.from_config(config), turns=turns,
            modes=modes, agents=AgentCatalog(client, reactor), database_problem=db_watch.check,
            metrics=metrics, transcripts=client, routing=routing,
            on_transcript=modes.observe_transcript,
            target_locks=None if shared is None else shared.target_locks,
            opencode_down=opencode_down, runtimes=[members.claude, members.mcp],
            opencode_v2=(v2.runtime, client.api),
            nothing_due=lambda: gate.quiet, shared_tick=ticker.set_interval,
        )  # fmt: skip
        ticker.add("arbiter", arbiter.scheduled_tick)
        reach.on_back(arbiter.opencode_back)
        verifier = Verifier(
            db, arbiter.runtimes.transcripts_of, reactor, config, on_requeued=arbiter.kick,
            turns_ended=turns_ended_of(members.claude, turns, v2.events),
            routing=routing, opencode_down=opencode_down,
        )  # fmt: skip

        def verify() -> None:
            if db_watch.check() is None:  # a vanished database: nothing to verify against
                verifier.tick()
                permissions.tick()

        # a 2.x session gone idle: its transcript looked at now, its permissions polled
        v2.events.listen(verifier.check_soon, permissions.poll_soon)
        ticker.add("verify", unless_quiet(gate, verify))
        doors = MemberDoors(
            reactor, members.slots, members.claude, members.paths, arbiter,
            verify=verifier.check_soon,
        )  # fmt: skip
        delivery = DeliveryParts(
            client, registry, verifier, turns, shared, MemberLiveness(registry, db), doors,
            permissions, v2,
        )  # fmt: skip
        if shared is not None:
            gate.watch(shared.listen(arbiter.kick).changes)  # PostgreSQL's writes, heard
    # owed replies: reminders and overdue notices, kicked at once when delivery runs
    reminders = ReminderSweep(db, reactor, arbiter.kick if arbiter is not None else _no_kick)
    ticker.add("reminders", unless_quiet(gate, reminders.sweep))
    flood = FloodGuard.from_config(db, reactor, config)
    # each session's consent: every policy in memory, read again for other processes' writes
    policies = PolicyBook(db, reactor)
    policies.load()
    ticker.add("policies", on_change(gate, policies.refresh), every_s=REFRESH_S)
    # the conversation brakes, asked in order; a person's prompts read where delivery reads
    # (a 2.x's read by the 2.x client on opencode's URL once it is found to be a 2.x)
    reading = None if delivery is None else (delivery.registry, delivery.client)
    v2_reads = None if delivery is None or delivery.v2 is None else delivery.v2.client
    prompts = person_prompts(members, reading, v2_reads)
    # each member's own tool calls, read from its own transcript: a session's own things
    # are only its own calls' (or a person's) to change
    tool_calls = tool_call_readers(members, reactor, reading, v2_reads)
    authority = SessionAuthority(tool_calls, reactor)
    brakes = conversation_brakes(db, config, prompts)
    kick = arbiter.kick if arbiter is not None else _no_kick
    # who really sent each message: settled off the accept path, before its hand-off
    proofs = sender_proof_job(
        db, reactor, config, ticker, gate, tool_calls, kick,
        None if delivery is None else delivery.routing,
    )  # fmt: skip
    # unknown targets refused at send; with delivery off there is no opencode to ask
    target_check = (
        None
        if delivery is None
        else TargetCheck(
            delivery.liveness, config.opencode_url, reactor, db, config, shared=delivery.routing
        )
    )
    routes = SwarmRoutes(
        db,
        reactor,
        config,
        on_accepted=accepted_then(kick, proofs),
        delivery_health=functools.partial(
            delivery_health_with_api,
            arbiter,
            None if delivery is None else delivery.client,
            events,
            None if delivery is None or delivery.v2 is None else delivery.v2.events,
        ),
        send_checks=[db_watch.refuse_send],
        admission=flood,
        storage_problem=db_watch.check,
        consent=policies.judge,
        brakes=brakes,
        target_check=target_check,
    )
    access, notes = access_policy(config)
    api = routes.install(JsonApi(gate=access))
    channels = install_side_routes(
        api, db, reactor, config, routes=routes, metrics=metrics, policies=policies,
        delivery=delivery, members=members, kick=kick, authority=authority,
    )  # fmt: skip
    site = make_site(api, config, reactor=reactor)
    return Daemon(
        config=config, db=db, site=site, arbiter=arbiter, events=events, pool=pool,
        reactor=reactor, routes=routes, api=api, delivery=delivery, access=access, flood=flood,
        notes=notes, pruner=pruner, db_watch=db_watch, jobs=jobs, channels=channels,
        brakes=brakes, authority=authority, proofs=proofs, ticker=ticker, quiet=gate,
        target_check=target_check,
    )  # fmt: skip
