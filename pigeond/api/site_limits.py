"""The site whose connections are bounded: :class:`LimitedChannel` connections, counted in
one :class:`~pigeond.api.connection_slots.ConnectionSlots`."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.web import server

from pigeond.api.connection_slots import Admission, ConnectionSlots
from pigeond.api.http_limits import LimitedChannel
from pigeond.config import DEFAULTS


class LimitedSite(server.Site):
    """A ``Site`` whose connections are :class:`LimitedChannel`, at most
    ``slots.max_connections`` of them at once (see :mod:`pigeond.api.connection_slots`);
    beyond the refusals the descriptors allow, a new connection is closed at once without
    an answer (Twisted closes the socket when ``buildProtocol`` returns None)."""

    # HTTPFactory's default wraps the channel to negotiate HTTP/2 over TLS; pigeond
    # speaks HTTP/1.1 in clear, so the channel class is the protocol itself.
    protocol = LimitedChannel  # type: ignore[assignment]

    request_timeout_s: float = DEFAULTS.request_timeout_s

    def __init__(self, resource: Any, **kwargs: Any) -> None:
        super().__init__(resource, **kwargs)  # type: ignore[no-untyped-call]
        self.slots = ConnectionSlots(self.reactor)

    def buildProtocol(self, addr: Any) -> Any:
        admission = self.slots.admit()
        if admission is Admission.CLOSE:
            return None
        channel = super().buildProtocol(addr)  # type: ignore[no-untyped-call]
        channel.admission = admission
        return channel

    def close_connections(self) -> Deferred[None]:
        """Close every connection once what was written to it has been sent (shutdown,
        after the answers under way were written: the reactor's own shutdown drops
        connections with their answers unsent).  Fires when all are closed."""
        return self.slots.close_all()


__all__ = ["LimitedSite"]
