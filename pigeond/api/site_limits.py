"""How many connections a site serves at once, and what happens at the cap.

At ``max_connections`` a new connection makes room: the connection that has waited
longest for a request (at least :data:`~pigeond.api.http_limits.EVICT_AFTER_S`; idle,
or still trickling one in) is closed with a 503, so connections that send nothing
cannot lock out a client with a request.  Only when none has waited that long does
the new one get ``503 {"error": "too many connections"}`` and a close; in a flood of
connects that would leave too few descriptors even for those answers, the surplus is
closed without one.
"""

from __future__ import annotations

import resource
from collections import OrderedDict
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.web import server

from pigeond.api.http_limits import (
    CLOSE_GRACE_S,
    EVICT_AFTER_S,
    MIN_REFUSALS_OPEN,
    RESERVED_FDS,
    LimitedChannel,
    abort,
    error_response,
)
from pigeond.config import DEFAULTS

log = Logger()


class TooManyConnections(Protocol):
    """What a connection beyond ``max_connections`` gets: 503, then it is closed."""

    def __init__(self, site: LimitedSite) -> None:
        self._site = site
        self._closer: IDelayedCall | None = None
        self._counted = False

    def connectionMade(self) -> None:
        transport = self.transport
        assert transport is not None
        self._counted = True
        self._site.refusals_open += 1
        transport.write(error_response(503, "too many connections"))
        transport.loseConnection()
        self._closer = self._site.reactor.callLater(CLOSE_GRACE_S, abort, transport)

    def dataReceived(self, data: bytes) -> None:
        pass  # the answer is out already

    def connectionLost(self, reason: Any = None) -> None:
        if self._closer is not None and self._closer.active():
            self._closer.cancel()
        self._closer = None
        if self._counted:
            self._counted = False
            self._site.refusals_open -= 1


class LimitedSite(server.Site):
    """A ``Site`` whose connections are :class:`LimitedChannel`, at most ``max_connections``
    of them at once (counted for this site, over all the ports it listens on).

    At the cap, the connection that has waited longest for a request (at least
    :data:`EVICT_AFTER_S`) is closed with a 503 to make room for the new one, so
    connections that send nothing, or trickle, cannot lock out a client with a
    request; only when none has waited that long is the new one refused.

    A connection refused with 503 holds its descriptor until its answer is written, a
    turn of the reactor later, and Twisted accepts a hundred connections or more in one
    turn: under a flood of connects, the refused ones alone could exhaust the
    descriptors, and then the kernel's accept fails for everyone.  So at most
    :meth:`refusals_allowed` refusals are open at once (what the open-files limit leaves
    beside ``max_connections`` and ``RESERVED_FDS``; thousands under the units'
    ``LimitNOFILE=``); beyond that a new connection is closed at once without an answer
    (Twisted closes the socket when ``buildProtocol`` returns None).
    """

    # HTTPFactory's default wraps the channel to negotiate HTTP/2 over TLS; pigeond
    # speaks HTTP/1.1 in clear, so the channel class is the protocol itself.
    protocol = LimitedChannel  # type: ignore[assignment]

    request_timeout_s: float = DEFAULTS.request_timeout_s
    max_connections: int = DEFAULTS.max_connections
    open_connections = 0  # LimitedChannel connections
    refusals_open = 0  # TooManyConnections not closed yet
    max_refusals_open: int | None = None  # None: from the open-files limit
    _full_logged = False
    # counted connections, in the order they began to wait for a request; made on first
    # use (Site's __init__ has no hook for it)
    _open: OrderedDict[LimitedChannel, None] | None = None
    _all_closed: list[Deferred[None]]

    def buildProtocol(self, addr: Any) -> Any:
        if self.open_connections >= self.max_connections:
            self._make_room()
        if self.open_connections >= self.max_connections:
            if not self._full_logged:
                self._full_logged = True
                log.warn(
                    "{n} connections open, the most max_connections allows, and none has"
                    " waited {s:g} s for a request: refusing new ones with 503 until one has",
                    n=self.open_connections,
                    s=EVICT_AFTER_S,
                )
            if self.refusals_open >= self.refusals_allowed():
                return None
            return TooManyConnections(self)
        return super().buildProtocol(addr)  # type: ignore[no-untyped-call]

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


__all__ = ["LimitedSite", "TooManyConnections"]
