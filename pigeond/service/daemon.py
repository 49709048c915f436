"""The running daemon: what it listens on, how it starts and stops its parts, how a
reload reaches them, and what it says of its health (systemd's status line, the
watchdog).  :mod:`pigeond.service.wiring` builds it.

Nothing here touches the global reactor; the entry point passes it in, and
tests pass their own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Protocol

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IListeningPort, IReactorTime
from twisted.logger import Logger
from twisted.web.client import HTTPConnectionPool

from pigeond.api.access import AccessPolicy
from pigeond.api.authority import SessionAuthority
from pigeond.api.channels import ChannelRoutes
from pigeond.api.flood import FloodGuard
from pigeond.api.routes import DELIVERY_OFF, DeliveryHealth, SwarmRoutes
from pigeond.api.target_check import TargetCheck
from pigeond.api.web import JsonApi, QuietSite
from pigeond.brakes import Brake
from pigeond.config import Config
from pigeond.delivery.arbiter import Arbiter
from pigeond.delivery.events import EventStream
from pigeond.delivery.sender_proof import SenderProofJob
from pigeond.service.db_watch import DatabaseWatch
from pigeond.service.delivery_parts import DeliveryParts
from pigeond.service.listeners import listen_runtime_socket, server_endpoint
from pigeond.service.parts import (
    delivery_health_with_api,
    describe_address,
)
from pigeond.service.pruner import Pruner
from pigeond.service.quiet import QuietGate
from pigeond.service.reload import RESTART_ONLY, config_changes, needing_restart
from pigeond.service.ticker import Ticker
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database

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
    reactor: IReactorTime
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
    # the services beside the arbiter's tick, on the injected clock, started and stopped
    # together: the database watch, the pruner and the one tick every periodic job runs on
    jobs: MultiService = field(default_factory=MultiService)
    # the conversation brakes, in the order a send is judged (pigeond/brakes/)
    brakes: tuple[Brake, ...] = ()
    # who may act on a session's own things (names, policy, channels): pigeond/api/authority.py
    authority: SessionAuthority | None = None
    # who really sent each message (pigeond/delivery/sender_proof.py)
    proofs: SenderProofJob | None = None
    # the one tick of every periodic job, and whether a write may have come since a read
    ticker: Ticker | None = None
    quiet: QuietGate | None = None
    # refuses a send to a session opencode does not have (None with delivery off)
    target_check: TargetCheck | None = None
    # the status line's counts, and the gate's change they were read at
    status_counts: tuple[int, dict[str, int]] | None = field(default=None, init=False)

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
        # whether delivery runs or not: the database watch, the pruner, expiry, reminders...
        # (and, with delivery, verification)
        self.jobs.startService()
        if self.arbiter is None:
            log.info("arbiter NOT started: opencode_url is empty; messages stay queued")
            return
        if self.events is not None:
            self.events.start()
        if self.delivery is not None and self.delivery.v2 is not None:
            self.delivery.v2.events.start()
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
        if self.delivery is not None and self.delivery.v2 is not None:
            self.delivery.v2.events.stop()
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
        if self.pool is not None:
            await self.pool.closeCachedConnections()
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
        counts = await self.open_counts()
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

    async def open_counts(self) -> dict[str, int]:
        """The open messages by state, read again only when a write may have come since the
        last read (every call where the gate watches nothing)."""
        seen = -1 if self.quiet is None else self.quiet.changes
        kept = self.status_counts
        if kept is not None and self.quiet is not None and not self.quiet.changed_since(kept[0]):
            return kept[1]
        counts = await self.db.read(SwarmRepository.count_open)
        self.status_counts = (seen, counts)
        return counts

    def reconfigurable(self) -> list[Reconfigurable]:
        """Every part a reload reaches; each takes the new settings through ``configure``."""
        parts: list[Reconfigurable] = [self.site, self.routes, self.db, self.pruner, *self.brakes]
        optional = (self.flood, self.access, self.arbiter, self.channels, self.proofs, self.quiet,
                    self.target_check)  # fmt: skip
        parts += [p for p in optional if p is not None]
        if self.delivery is not None:
            d = self.delivery
            parts += [d.client, d.registry, d.verifier, *([d.turns] if d.turns else [])]
            parts += [d.permissions] if d.permissions is not None else []
            parts += [d.v2] if d.v2 is not None else []
        return parts

    def delivery_health(self) -> DeliveryHealth:
        """What /health and /metrics tell of delivery."""
        client = None if self.delivery is None else self.delivery.client
        v2 = None if self.delivery is None or self.delivery.v2 is None else self.delivery.v2.events
        return delivery_health_with_api(self.arbiter, client, self.events, v2)

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


def stop_later(daemon: Daemon) -> Deferred[None]:
    """``daemon.stop`` as a Deferred, for reactor shutdown triggers."""
    return Deferred.fromCoroutine(daemon.stop())
