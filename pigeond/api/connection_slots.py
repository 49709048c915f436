"""How many connections a site serves at once, and what happens at the cap.

At ``max_connections`` a new connection makes room: the connection that has waited
longest for a request (at least :data:`EVICT_AFTER_S`; idle, or still trickling one in)
is closed with a 503, so connections that send nothing cannot lock out a client with a
request.  When none has waited that long (right after a flood of connects), the new one
is served on probation (:data:`PROBATION_S`): its whole request, if it comes in that
time, takes the place of the connection that has waited longest for one, however young;
else it gets ``503 {"error": "too many connections"}`` and a close.  So a /health probe
right after a slowloris flood is answered at once, where it got a 503 for up to a second.

A connection on probation, or refused with 503, holds its descriptor until it is closed,
a turn of the reactor later at the soonest, and Twisted accepts a hundred connections or
more in one turn: under a flood of connects, the refused ones alone could exhaust the
descriptors, and then the kernel's accept fails for everyone.  So at most
:meth:`ConnectionSlots.refusals_allowed` refusals are open at once (what the open-files
limit leaves beside ``max_connections`` and :data:`RESERVED_FDS`; thousands under the
units' ``LimitNOFILE=``); beyond that a new connection is closed at once without an
answer.  Probations count among those refusals, at most a quarter of them
(:meth:`ConnectionSlots.probations_allowed`): past that a new connection displaces the
oldest probation, which is closed at once.

:class:`ConnectionSlots` is the one owner of this count; the connections
(:class:`pigeond.api.http_limits.LimitedChannel`) tell it when they open, wait, receive a
request and close, and it tells them when to give up their place.
"""

from __future__ import annotations

import resource
from collections import OrderedDict
from enum import Enum
from typing import Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from pigeond.config import DEFAULTS

log = Logger()

# Descriptors kept for everything but client connections (database, WAL, lock,
# listeners, epoll, connections to opencode...), when sizing how many 503 answers may
# be in the works at once.
RESERVED_FDS = 64
MIN_REFUSALS_OPEN = 8
# At the connection cap, a connection that has waited this long for its next request
# (idle, or still trickling one in) is closed to make room for the new one; younger
# ones are not, so a burst of fresh connections cannot push out requests on their way.
EVICT_AFTER_S = 1.0
# At the cap with none of them waiting that long, a new connection is served on probation
# for this long: if its whole request arrives meanwhile, it takes the place of the one
# that has waited longest for a request, however young (that one sent none, this one a
# whole one); else it gets the 503.  A client on the same machine sends its request as
# soon as it is connected, so /health answers at once right after a flood of connects.
PROBATION_S = 1.0
# Connections on probation at once, at most (see ConnectionSlots.probations_allowed).
PROBATIONS_AT_ONCE = 64


class Connection(Protocol):
    """What the slots need of a connection."""

    @property
    def waiting(self) -> bool:
        """Waiting for a request (idle, or one still arriving), answering none."""
        ...

    def evict(self) -> None:
        """Answer 503 (closed to make room) and close."""
        ...

    def refuse_at_cap(self) -> None:
        """Answer 503 (too many connections) and close: its probation is over."""
        ...

    def displace(self) -> None:
        """Close at once, unanswered: a newer connection takes its place on probation."""
        ...

    def close_when_sent(self) -> None:
        """Close once what was written to it has been sent."""
        ...


class Admission(Enum):
    """What becomes of a new connection."""

    SERVE = "serve"  # it has a slot
    PROBATION = "probation"  # beyond the cap, until its whole request comes
    CLOSE = "close"  # closed at once, unanswered: too many refusals are open


class ConnectionSlots:
    """The connections a site serves, at most ``max_connections`` at once (over all the
    ports it listens on), and those being refused or on probation beyond them."""

    def __init__(self, clock: IReactorTime, max_connections: int = DEFAULTS.max_connections):
        self.clock = clock
        self.max_connections = max_connections  # a reload changes it for the next connection
        self.max_refusals_open: int | None = None  # None: from the open-files limit
        # connections with a slot, in the order they began to wait for a request, and when
        self._open: OrderedDict[Connection, float] = OrderedDict()
        # beyond the slots: refused and not closed yet, or on probation (oldest first)
        self._refusing: set[Connection] = set()
        self._probations: OrderedDict[Connection, IDelayedCall] = OrderedDict()
        self._full_logged = False
        self._all_closed: list[Deferred[None]] = []

    @property
    def open_connections(self) -> int:
        return len(self._open)

    @property
    def refusals_open(self) -> int:
        return len(self._refusing)

    # -- a new connection ---------------------------------------------------------------

    def admit(self) -> Admission:
        """Whether a new connection gets a slot (making room if one has waited long enough),
        probation, or nothing; it is counted once :meth:`connected`."""
        if self.open_connections >= self.max_connections:
            self._make_room()
        if self.open_connections < self.max_connections:
            return Admission.SERVE
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
        if len(self._probations) >= self.probations_allowed(allowed):
            # the newest connection may be a client with a request; the oldest probation
            # has had its chance
            oldest = next(iter(self._probations))
            self._end_probation(oldest)
            oldest.displace()
        if self.refusals_open >= allowed:
            return Admission.CLOSE
        return Admission.PROBATION

    def connected(self, connection: Connection, admission: Admission) -> None:
        if admission is Admission.PROBATION:
            self._refusing.add(connection)
            self._probations[connection] = self.clock.callLater(
                PROBATION_S, self._probation_over, connection
            )
        else:
            self._open[connection] = self.clock.seconds()

    @staticmethod
    def probations_allowed(refusals_allowed: int) -> int:
        """Connections on probation at once: a quarter of the refusals (at most
        PROBATIONS_AT_ONCE), so the rest can take the 503s of the probations a flood
        displaces in one turn of the reactor (Twisted accepts a hundred or more in one),
        and a client connecting right after the flood is not closed unanswered."""
        return max(1, min(PROBATIONS_AT_ONCE, refusals_allowed // 4))

    def refusals_allowed(self) -> int:
        if self.max_refusals_open is not None:
            return self.max_refusals_open
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)  # pigeond raises it at start
        if soft == resource.RLIM_INFINITY:
            soft = 1 << 20
        return max(MIN_REFUSALS_OPEN, soft - self.max_connections - RESERVED_FDS)

    # -- a connection's life --------------------------------------------------------------

    def request_arrived(self, connection: Connection) -> bool:
        """A whole request came on ``connection``: False when it is on probation and every
        slot is answering a request (it gets the 503); else it has a slot, one on probation
        taking that of the connection that has waited longest, however young."""
        if connection not in self._probations:
            return True
        self._end_probation(connection)
        if self.open_connections >= self.max_connections:
            waiting = next((c for c in self._open if c.waiting), None)
            if waiting is None:
                return False
            self._evict(waiting)
        self._refusing.discard(connection)
        self._open[connection] = self.clock.seconds()
        return True

    def waiting_again(self, connection: Connection) -> None:
        """``connection`` answered a request and waits for the next: it goes last in line."""
        if connection in self._open:
            self._open[connection] = self.clock.seconds()
            self._open.move_to_end(connection)

    def closed(self, connection: Connection) -> None:
        """``connection`` is gone: its slot, or its place among the refusals, is free."""
        self._end_probation(connection)
        self._refusing.discard(connection)
        self._free_slot(connection)

    def _free_slot(self, connection: Connection) -> None:
        if self._open.pop(connection, None) is None:
            return
        if self._full_logged and self.open_connections < self.max_connections:
            self._full_logged = False
            log.info("connections below max_connections again: accepting new ones")
        if not self._open:
            waiting, self._all_closed = self._all_closed, []
            for d in waiting:
                d.callback(None)

    def close_all(self) -> Deferred[None]:
        """Close every connection with a slot once what was written to it has been sent;
        fires when all are closed."""
        if not self._open:
            return succeed(None)
        closed: Deferred[None] = Deferred()
        self._all_closed.append(closed)
        for connection in list(self._open):
            connection.close_when_sent()
        return closed

    # -- making room ----------------------------------------------------------------------

    def _make_room(self) -> None:
        """Close the connection that has waited longest for a request, if that is at least
        EVICT_AFTER_S and the descriptors allow one more refusal: a slowloris or idle
        connection then cannot keep a client with a request out."""
        if self.refusals_open >= self.refusals_allowed():
            return
        now = self.clock.seconds()
        for connection, since in self._open.items():
            if not connection.waiting:
                continue  # answering: never cut
            if now - since >= EVICT_AFTER_S:
                self._evict(connection)
            return  # the oldest waiting one decides: the rest waited less

    def _evict(self, connection: Connection) -> None:
        """Its slot is free at once; it counts as a refusal until it is closed."""
        self._free_slot(connection)
        self._refusing.add(connection)
        connection.evict()

    def _probation_over(self, connection: Connection) -> None:
        self._probations.pop(connection, None)
        connection.refuse_at_cap()

    def _end_probation(self, connection: Connection) -> None:
        call = self._probations.pop(connection, None)
        if call is not None and call.active():
            call.cancel()


__all__ = [
    "EVICT_AFTER_S",
    "MIN_REFUSALS_OPEN",
    "PROBATIONS_AT_ONCE",
    "PROBATION_S",
    "RESERVED_FDS",
    "Admission",
    "Connection",
    "ConnectionSlots",
]
