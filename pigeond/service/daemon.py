"""Wiring: one factory builds every layer from a :class:`Config` and a reactor.

Nothing here touches the global reactor; the entry point passes it in, and
tests pass their own.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from treq.client import HTTPClient
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IListeningPort
from twisted.logger import Logger
from twisted.web.client import HTTPConnectionPool

from pigeond.api.access import AccessPolicy
from pigeond.api.authority import SessionAuthority
from pigeond.api.channels import ChannelRoutes
from pigeond.api.flood import FloodGuard
from pigeond.api.policy import REFRESH_S, PolicyBook
from pigeond.api.routes import DELIVERY_OFF, DeliveryHealth, SwarmRoutes
from pigeond.api.target_check import TargetCheck
from pigeond.api.web import JsonApi, QuietSite, make_site
from pigeond.brakes import Brake
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
from pigeond.delivery.sender_proof import SenderProofJob
from pigeond.delivery.sweeper import ExpirySweeper
from pigeond.delivery.turns import TurnTracker
from pigeond.delivery.verifier import Verifier
from pigeond.service.brakes import conversation_brakes, person_prompts
from pigeond.service.db_watch import DatabaseWatch
from pigeond.service.delivery_parts import DeliveryParts
from pigeond.service.listeners import listen_runtime_socket, server_endpoint
from pigeond.service.members import (
    MemberLiveness,
    member_parts,
    tool_call_readers,
    turns_ended_of,
)
from pigeond.service.parts import (
    access_policy,
    both,
    delivery_health_with_api,
    describe_address,
    opencode_client,
    timer_job,
)
from pigeond.service.pruner import Pruner
from pigeond.service.reload import RESTART_ONLY, config_changes, needing_restart
from pigeond.service.sender_proofs import accepted_then, sender_proof_job
from pigeond.service.shared_db import seen_status, shared_database_parts
from pigeond.service.side_routes import install_side_routes
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database, open_threaded

log = Logger()


class Reconfigurable(Protocol):
    """A part that takes a reload's settings (it reads what it needs of them)."""

    def configure(self, config: Config) -> None: ...


@dataclass
class Daemon:
    config: Config
    db: Database
    site: QuietSite
    arbiter: Arbiter | None
    events: EventStream | None
    pool: HTTPConnectionPool | None
    reactor: Any
    routes: SwarmRoutes
    api: JsonApi
    pruner: Pruner
    delivery: DeliveryParts | None = None
    access: AccessPolicy | None = None
    flood: FloodGuard | None = None
    channels: ChannelRoutes | None = None
    notes: list[str] = field(default_factory=list)
    ports: list[IListeningPort] = field(default_factory=list)
    db_watch: DatabaseWatch | None = None
    # the periodic jobs beside the arbiter's tick, each a TimerService on the injected clock
    jobs: MultiService = field(default_factory=MultiService)
    # the conversation brakes, in the order a send is judged (pigeond/brakes/)
    brakes: tuple[Brake, ...] = ()
    # who may act on a session's own things (names, policy, channels): pigeond/api/authority.py
    authority: SessionAuthority | None = None
    # who really sent each message (pigeond/delivery/sender_proof.py)
    proofs: SenderProofJob | None = None

    async def listen(self) -> IListeningPort:
        """Listen on ``config.listen`` (``unix:`` private by default, a passed Unix socket
        adopted without chmod or unlink: see :mod:`pigeond.service.listeners`)."""
        endpoint = server_endpoint(self.reactor, self.config.listen)
        port: IListeningPort = await endpoint.listen(self.site)
        self.ports.append(port)
        log.info("listening on {address}", address=describe_address(port))
        return port

    def listen_runtime(self) -> IListeningPort | None:
        """Also listen on the runtime socket clients try first (``runtime_socket``), unless it
        is the ``listen`` socket itself. Never fatal: why it is not used is logged, and
        ``listen`` still serves."""
        path = self.config.runtime_socket
        if not path:
            return None
        wanted = "unix:" + os.path.abspath(path)
        if any(describe_address(p) in (wanted, "unix:" + path) for p in self.ports):
            return None
        port = listen_runtime_socket(self.reactor, self.site, path, self.config.allow_group)
        if port is None:
            return None
        self.ports.append(port)
        log.info("also listening on {address} (runtime socket)", address=describe_address(port))
        return port

    def start_delivery(self) -> None:
        for note in self.notes:
            log.info("{note}", note=note)
        if self.db_watch is not None:
            self.db_watch.start()  # a deleted database is noticed whether delivery runs or not
        self.pruner.start()  # history is pruned whether delivery runs or not
        self.jobs.startService()  # expiry (and, with delivery, verification)
        if self.arbiter is None:
            log.info("arbiter NOT started: opencode_url is empty; messages stay queued")
            return
        if self.events is not None:
            self.events.start()
        self.arbiter.start()
        log.info(
            "arbiter started: opencode {url}, delivery {delivery}, tick {tick_ms} ms",
            url=self.config.opencode_url,
            delivery=self.config.delivery,
            tick_ms=self.config.tick_ms,
        )

    async def stop(self) -> None:
        """Stop accepting, answer the requests under way and let hand-offs in flight end
        (each bounded by stop_timeout_s), then close the database."""
        for port in self.ports:
            stopped = port.stopListening()
            if stopped is not None:
                await stopped
        self.ports.clear()
        if not await self._finished_in_time(self.api.answered()):
            log.warn("requests still unanswered after {s} s", s=self.config.stop_timeout_s)
        await self._finished_in_time(self.site.close_connections())  # answers sent first
        if self.events is not None:
            self.events.stop()
        if self.arbiter is not None:
            if not await self._finished_in_time(self.arbiter.stop()):
                log.warn(
                    "hand-offs still in flight after {s} s: {targets}; they stay queued",
                    s=self.config.stop_timeout_s, targets=self.arbiter.in_flight_targets(),
                )  # fmt: skip
            await self.arbiter.close()  # what ends from now on must not write: the db closes
        if self.jobs.running:
            await self.jobs.stopService()
        if self.delivery is not None:
            self.delivery.verifier.close()
            if self.delivery.permissions is not None:
                self.delivery.permissions.close()
            self.delivery.client.close()
            if self.delivery.shared is not None:
                self.delivery.shared.close()
        if self.db_watch is not None:
            self.db_watch.stop()
        if self.pool is not None:
            await self.pool.closeCachedConnections()
        self.pruner.stop()
        self.db.close()  # waits for the writes already asked (each at most the busy timeout)
        log.info("stopped")

    async def _finished_in_time(self, work: Deferred[None]) -> bool:
        """Wait for ``work`` at most stop_timeout_s, without cancelling it: the process
        is about to exit, and a cancelled hand-off must not be retried meanwhile."""
        waiter: Deferred[bool] = Deferred()

        def settle(finished: bool) -> None:
            if not waiter.called:
                waiter.callback(finished)

        timer = self.reactor.callLater(self.config.stop_timeout_s, settle, False)
        work.addBoth(lambda _: settle(True))
        finished = await waiter
        if timer.active():
            timer.cancel()
        return finished

    def database_problem(self) -> str | None:
        """Why the database file on disk is not the one this process opened; None while it is."""
        return None if self.db_watch is None else self.db_watch.check()

    async def status_line(self) -> str:
        """``systemctl status``'s line: ``queued 3, failed 1, in flight 2, opencode ok``."""
        problem = self.database_problem()
        if problem is not None:
            return f"{problem}; restart pigeond"
        counts = await self.db.read(SwarmRepository.count_open)
        parts = [f"queued {counts.get('queued', 0)}", f"failed {counts.get('failed', 0)}"]
        health = self.delivery_health()
        if health is DELIVERY_OFF:
            return ", ".join([*parts, "delivery off"])
        parts += [f"in flight {health.in_flight}", health.problem or f"opencode {health.opencode}"]
        if health.event_stream == "down":
            parts.append("event stream down")
        if health.unrecorded:
            parts.append(f"{health.unrecorded} hand-off(s) not yet recorded (database full?)")
        return ", ".join(parts)

    def reconfigurable(self) -> list[Reconfigurable]:
        """Every part a reload reaches; each takes the new settings through ``configure``."""
        parts: list[Reconfigurable] = [self.site, self.routes, self.db, self.pruner, *self.brakes]
        optional = (self.flood, self.access, self.arbiter, self.channels, self.proofs)
        parts += [p for p in optional if p is not None]
        if self.delivery is not None:
            d = self.delivery
            parts += [d.client, d.registry, d.verifier, *([d.turns] if d.turns else [])]
            parts += [d.permissions] if d.permissions is not None else []
        return parts

    def delivery_health(self) -> DeliveryHealth:
        """What /health and /metrics tell of delivery."""
        client = None if self.delivery is None else self.delivery.client
        return delivery_health_with_api(self.arbiter, client, self.events)

    def alive(self, within_s: float) -> bool:
        """For the watchdog: the arbiter ticks (or, with delivery off, timers run at all) and
        the database file is still the one opened; a restart opens the one on disk."""
        if self.database_problem() is not None:
            return False
        return self.arbiter is None or self.arbiter.ticking(within_s)

    def reload(self, new: Config) -> list[str]:
        """Apply what can change while running; return the settings that need a restart
        (in part, for allow_group: see :mod:`pigeond.service.reload`)."""
        needs_restart = needing_restart(config_changes(self.config, new))
        for part in self.reconfigurable():
            part.configure(new)
        kept = {o: getattr(self.config, o) for o in RESTART_ONLY}
        self.config = replace(new, **kept, opencode_auth=self.config.opencode_auth)
        return needs_restart


def build_daemon(
    config: Config, reactor: Any, http: HTTPClient | None = None, db: Database | None = None
) -> Daemon:
    """Open and migrate the database (unless ``db`` is given: tests on a ``Clock`` pass an
    :class:`~pigeond.storage.database.InlineDatabase`) and wire the layers; listens on
    nothing yet."""
    if db is None:
        db = open_threaded(config.connect_db, reactor)
    db.configure(config)
    try:
        return _wire(config, reactor, http, db)
    except BaseException:
        db.close()
        raise


def _no_kick(target: str) -> None:
    """With delivery off nothing is handed off: a queued reminder waits for a daemon that
    delivers."""


def _wire(config: Config, reactor: Any, http: HTTPClient | None, db: Database) -> Daemon:
    db_watch = DatabaseWatch(config.db, reactor, interval_s=config.tick_ms / 1000)
    metrics = DeliveryMetrics()  # its registry also holds /metrics' gauges
    jobs = MultiService()
    sweeper = ExpirySweeper(db, reactor)
    timer_job("sweep", config.tick_ms / 1000, sweeper.sweep, reactor).setServiceParent(jobs)
    arbiter: Arbiter | None = None
    events: EventStream | None = None
    pool: HTTPConnectionPool | None = None
    delivery: DeliveryParts | None = None
    members = member_parts(db, reactor)
    if config.arbiter_enabled:
        client, pool = opencode_client(config, reactor, http, members.reads)
        registry = SessionDirectoryRegistry(client, reactor, config)
        reach = client.reachability  # an outage of opencode: everything waits for its end

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
            db, client, reactor, config, directory_of=registry.resolve,
            known_idle=turns.known_idle if turns is not None else (lambda session: False),
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
        )  # fmt: skip
        reach.on_back(arbiter.opencode_back)
        verifier = Verifier(
            db, arbiter.runtimes.transcripts_of, reactor, config, on_requeued=arbiter.kick,
            turns_ended=turns_ended_of(members.claude, turns),
            routing=routing, opencode_down=opencode_down,
        )  # fmt: skip

        def verify() -> None:
            if db_watch.check() is None:  # a vanished database: nothing to verify against
                verifier.tick()
                permissions.tick()

        timer_job("verify", config.tick_ms / 1000, verify, reactor).setServiceParent(jobs)
        doors = MemberDoors(
            reactor, members.slots, members.claude, members.paths, arbiter,
            verify=verifier.check_soon,
        )  # fmt: skip
        delivery = DeliveryParts(
            client, registry, verifier, turns, shared, MemberLiveness(registry, db), doors,
            permissions,
        )  # fmt: skip
        if shared is not None:
            shared.listen(arbiter.kick)
    # owed replies: reminders and overdue notices, kicked at once when delivery runs
    reminders = ReminderSweep(db, reactor, arbiter.kick if arbiter is not None else _no_kick)
    timer_job("reminders", config.tick_ms / 1000, reminders.sweep, reactor).setServiceParent(jobs)
    flood = FloodGuard.from_config(db, reactor, config)
    # each session's consent: every policy in memory, read again for other processes' writes
    policies = PolicyBook(db, reactor)
    policies.load()
    timer_job("policies", REFRESH_S, policies.refresh, reactor).setServiceParent(jobs)
    # the conversation brakes, asked in order; a person's prompts read where delivery reads
    reading = (None, None) if delivery is None else (delivery.registry, delivery.client)
    prompts = person_prompts(members, *reading)
    # each member's own tool calls, read from its own transcript: a session's own things
    # are only its own calls' (or a person's) to change
    tool_calls = tool_call_readers(
        members, reactor, None if delivery is None else (delivery.registry, delivery.client)
    )
    authority = SessionAuthority(tool_calls, reactor)
    brakes = conversation_brakes(db, config, prompts)
    kick = arbiter.kick if arbiter is not None else _no_kick
    # who really sent each message: settled off the accept path, before its hand-off
    proofs = sender_proof_job(
        db, reactor, config, jobs, tool_calls, kick, None if delivery is None else delivery.routing
    )
    routes = SwarmRoutes(
        db,
        reactor,
        config,
        on_accepted=accepted_then(kick, proofs),
        delivery_health=functools.partial(
            delivery_health_with_api, arbiter, None if delivery is None else delivery.client, events
        ),
        send_checks=[db_watch.refuse_send],
        admission=flood,
        storage_problem=db_watch.check,
        consent=policies.judge,
        brakes=brakes,
        # unknown targets refused at send; with delivery off there is no opencode to ask
        target_check=None
        if delivery is None
        else TargetCheck(
            delivery.liveness, config.opencode_url, reactor, db, shared=delivery.routing
        ),
    )
    access, notes = access_policy(config)
    api = routes.install(JsonApi(gate=access))
    channels = install_side_routes(
        api, db, reactor, config, routes=routes, metrics=metrics, policies=policies,
        delivery=delivery, members=members, kick=kick, authority=authority,
    )  # fmt: skip
    site = make_site(api, config, reactor=reactor)
    pruner = Pruner(db, reactor, retention_days=config.retention_days)
    return Daemon(
        config=config, db=db, site=site, arbiter=arbiter, events=events, pool=pool,
        reactor=reactor, routes=routes, api=api, delivery=delivery, access=access, flood=flood,
        notes=notes, pruner=pruner, db_watch=db_watch, jobs=jobs, channels=channels,
        brakes=brakes, authority=authority, proofs=proofs,
    )  # fmt: skip


def stop_later(daemon: Daemon) -> Deferred[None]:
    """``daemon.stop`` as a Deferred, for reactor shutdown triggers."""
    return Deferred.fromCoroutine(daemon.stop())
