"""How many connections a site serves at once, and what happens at the cap.

At ``max_connections`` a new connection makes room: the connection that has waited
longest for a request (at least :data:`~pigeond.api.http_limits.EVICT_AFTER_S`; idle,
or still trickling one in) is closed with a 503, so connections that send nothing
cannot lock out a client with a request.  When none has waited that long (right after a
flood of connects), the new one is served on probation
(:data:`~pigeond.api.http_limits.PROBATION_S`): its whole request, if it comes in that
time, takes the place of the connection that has waited longest for one, however
young; else it gets ``503 {"error": "too many connections"}`` and a close.  So a
/health probe right after a slowloris flood is answered at once, where it got a 503 for
up to a second.  Probations count among the refusals being written, at most a quarter
of them (:meth:`LimitedSite.probations_allowed`): past that a new connection displaces
the oldest probation, which is closed at once.  In a flood of connects that would leave too
few descriptors even for those answers, the surplus is closed without one.
"""

from __future__ import annotations

import resource
from collections import OrderedDict
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from twisted.web import server

from pigeond.api.http_limits import (
    EVICT_AFTER_S,
    MIN_REFUSALS_OPEN,
    PROBATIONS_AT_ONCE,
    RESERVED_FDS,
    LimitedChannel,
)
from pigeond.config import DEFAULTS

log = Logger()


class LimitedSite(server.Site):
    """A ``Site`` whose connections are :class:`LimitedChannel`, at most ``max_connections``
    of them at once (counted for this site, over all the ports it listens on).

    At the cap, the connection that has waited longest for a request (at least
    :data:`EVICT_AFTER_S`) is closed with a 503 to make room for the new one, so
    connections that send nothing, or trickle, cannot lock out a client with a
    request.  When none has waited that long, the new one is on probation
    (:data:`~pigeond.api.http_limits.PROBATION_S`): its whole request, if it comes in
    time, takes the place of the connection waiting longest, else it gets the 503.

    A connection on probation, or refused with 503, holds its descriptor until it is
    closed, a turn of the reactor later at the soonest, and Twisted accepts a hundred
    connections or more in one turn: under a flood of connects, the refused ones alone
    could exhaust the descriptors, and then the kernel's accept fails for everyone.  So
    at most :meth:`refusals_allowed` refusals are open at once (what the open-files limit
    leaves beside ``max_connections`` and ``RESERVED_FDS``; thousands under the units'
    ``LimitNOFILE=``); beyond that a new connection is closed at once without an answer
    (Twisted closes the socket when ``buildProtocol`` returns None).
    """

    # HTTPFactory's default wraps the channel to negotiate HTTP/2 over TLS; pigeond
    # speaks HTTP/1.1 in clear, so the channel class is the protocol itself.
    protocol = LimitedChannel  # type: ignore[assignment]

    request_timeout_s: float = DEFAULTS.request_timeout_s
    max_connections: int = DEFAULTS.max_connections
    open_connections = 0  # LimitedChannel connections
    refusals_open = 0  # connections on probation, or refused and not closed yet
    max_refusals_open: int | None = None  # None: from the open-files limit
    _full_logged = False
    # counted connections, in the order they began to wait for a request; made on first
    # use (Site's __init__ has no hook for it)
    _open: OrderedDict[LimitedChannel, None] | None = None
    # connections beyond the cap on probation, oldest first (see PROBATION_S)
    _on_probation: OrderedDict[LimitedChannel, None] | None = None
    _all_closed: list[Deferred[None]]

    def buildProtocol(self, addr: Any) -> Any:
        if self.open_connections >= self.max_connections:
            self._make_room()
        if self.open_connections < self.max_connections:
            return super().buildProtocol(addr)  # type: ignore[no-untyped-call]
        if not self._full_logged:
            self._full_logged = True
            log.warn(
                "{n} connections open, the most max_connections allows, and none has"
                " waited {s:g} s for a request: a new one is served only if its whole"
                " request comes at once, else it gets 503",
                n=self.open_connections,
                s=EVICT_AFTER_S,
            )
        allowed = self.refusals_allowed()
        if len(self._probations()) >= self.probations_allowed(allowed):
            # the newest connection may be a client with a request; the oldest probation
            # has had its chance
            next(iter(self._probations())).displace()
        if self.refusals_open >= allowed:
            return None
        channel = super().buildProtocol(addr)  # type: ignore[no-untyped-call]
        channel.on_probation = True
        return channel

    @staticmethod
    def probations_allowed(refusals_allowed: int) -> int:
        """Connections on probation at once: a quarter of the refusals (at most
        PROBATIONS_AT_ONCE), so the rest can take the 503s of the probations a flood
        displaces in one turn of the reactor (Twisted accepts a hundred or more in one),
        and a client connecting right after the flood is not closed unanswered."""
        return max(1, min(PROBATIONS_AT_ONCE, refusals_allowed // 4))

    def probation_began(self, channel: LimitedChannel) -> None:
        self._probations()[channel] = None

    def probation_ended(self, channel: LimitedChannel) -> None:
        self._probations().pop(channel, None)

    def make_room_for(self, channel: LimitedChannel) -> bool:
        """A connection on probation has its whole request: a slot for it, freed by closing
        the connection that has waited longest for a request (however young); False when
        every slot is answering one."""
        if self.open_connections < self.max_connections:
            return True
        for waiting in self._channels():
            if waiting.waiting:
                waiting.evict()
                return True
        return False

    def _probations(self) -> OrderedDict[LimitedChannel, None]:
        if self._on_probation is None:
            self._on_probation = OrderedDict()
        return self._on_probation

    def refusals_allowed(self) -> int:
        if self.max_refusals_open is not None:
            return self.max_refusals_open
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)  # pigeond raises it at start
        if soft == resource.RLIM_INFINITY:
            soft = 1 << 20
        return max(MIN_REFUSALS_OPEN, soft - self.max_connections - RESERVED_FDS)

    def _make_room(self) -> None:
        """Close the connection that has waited longest for a request, if that is at least
        EVICT_AFTER_S and the descriptors allow one more refusal: a slowloris or idle
        connection then cannot keep a client with a request out."""
        if self.refusals_open >= self.refusals_allowed():
            return
        now = self.reactor.seconds()
        for channel in self._channels():
            if not channel.waiting:
                continue  # answering: never cut
            if now - channel.waiting_since >= EVICT_AFTER_S:
                channel.evict()
            return  # the oldest waiting one decides: the rest waited less

    def connection_opened(self, channel: LimitedChannel) -> None:
        self.open_connections += 1
        self._channels()[channel] = None

    def connection_waiting(self, channel: LimitedChannel) -> None:
        """``channel`` answered a request and waits for the next: it goes last in line."""
        self._channels().move_to_end(channel)

    def connection_closed(self, channel: LimitedChannel) -> None:
        self.open_connections -= 1
        channels = self._channels()
        channels.pop(channel, None)
        if self._full_logged and self.open_connections < self.max_connections:
            self._full_logged = False
            log.info("connections below max_connections again: accepting new ones")
        if not channels:
            waiting, self._all_closed = self._all_closed, []
            for d in waiting:
                d.callback(None)

    def close_connections(self) -> Deferred[None]:
        """Close every connection once what was written to it has been sent (shutdown,
        after the answers under way were written: the reactor's own shutdown drops
        connections with their answers unsent).  Fires when all are closed."""
        channels = self._channels()
        if not channels:
            return succeed(None)
        closed: Deferred[None] = Deferred()
        self._all_closed.append(closed)
        for channel in list(channels):
            if channel.transport is not None:
                channel.transport.loseConnection()
        return closed

    def _channels(self) -> OrderedDict[LimitedChannel, None]:
        if self._open is None:
            self._open = OrderedDict()
            self._all_closed = []
        return self._open


__all__ = ["LimitedSite"]
