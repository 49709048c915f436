"""Every private part of Twisted pigeond relies on, behind public names, in this one module.

Twisted's private names (a leading ``_``) change without notice between releases.  pigeond
needs five of them, for things Twisted offers no public hook for; each is listed in
:data:`INTERNALS` with why it is needed and what would replace it upstream, and used only
through the classes below, whose public methods the rest of pigeond calls or overrides.
tests/test_architecture.py holds the line: no other module imports a private Twisted name,
and no other subclass of a Twisted class defines or touches a name starting with ``_``
(such a name is either Twisted's, or may become one in its next release).  tests/
test_twisted_pin.py checks that the installed Twisted is inside the range pyproject.toml
pins and still has each name listed here.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from twisted.internet import tcp, unix
from twisted.web import http


@dataclass(frozen=True, slots=True)
class Internal:
    """One private name of Twisted used here: on which class, why, and what would replace it."""

    owner: type
    name: str
    why: str
    upstream: str


INTERNALS = (
    Internal(
        http.HTTPChannel,
        "_respondToBadRequestAndDisconnect",
        "the one place where Twisted answers a request it cannot parse (request line,"
        " header syntax, Content-Length, Transfer-Encoding, chunked body), with an empty"
        " body; overridden so the answer is JSON like every other",
        "a public, overridable 'bad request' answer on HTTPChannel",
    ),
    Internal(
        http.HTTPChannel,
        "_waitingForTransport",
        "whether the answer just written still fills the send buffer (the client is not"
        " reading): then the pipelined requests Twisted buffered must wait, or their"
        " answers queue without end",
        "HTTPChannel holding pipelined requests already buffered while the transport"
        " is paused, or a public 'send buffer full' property",
    ),
    Internal(
        http.HTTPChannel,
        "_networkProducer",
        "the producer that reads from the connection, paused while those requests wait",
        "as for _waitingForTransport",
    ),
    Internal(
        http.HTTPChannel,
        "_savedTimeOut",
        "the idle timeout Twisted suspends while it answers, restored while requests wait",
        "as for _waitingForTransport",
    ),
    Internal(
        tcp.Port,
        "_shouldShutdown",
        "tcp._SocketCloser's flag: close a listening socket without shutdown(), which"
        " would end a socket systemd passed for every holder (Twisted sets it for an"
        " adopted TCP socket, not for a Unix one)",
        "unix.Port adopting a passed socket as TCP does, and leaving its file alone"
        " (no chmod on start, no unlink on stop)",
    ),
)


class HookedHTTPChannel(http.HTTPChannel):
    """An ``HTTPChannel`` whose private parts pigeond needs have public names."""

    def _respondToBadRequestAndDisconnect(self) -> None:
        self.refuse_bad_request()

    def refuse_bad_request(self) -> None:
        """Answer a request Twisted cannot parse; Twisted's own answer has no body."""
        super()._respondToBadRequestAndDisconnect()  # type: ignore[no-untyped-call]

    def send_buffer_full(self) -> bool:
        """Whether what was written still waits for the client to read it."""
        return bool(self._waitingForTransport)

    def hold_reading(self) -> None:
        """Read nothing more from the connection until the send buffer drains (Twisted
        resumes reading itself then), with the idle timeout running meanwhile."""
        self._networkProducer.pauseProducing()
        if self._savedTimeOut:
            self.setTimeout(self._savedTimeOut)  # type: ignore[no-untyped-call]


class AdoptedUnixPort(unix.Port):
    """A ``unix.Port`` around a socket that is already bound and listening: never chmodded,
    never unlinked by Twisted, and closed without ``shutdown()`` (see :data:`INTERNALS`)."""

    _shouldShutdown = False

    def listen_on(self, sock: socket.socket) -> None:
        """What ``unix.Port.startListening`` does after its bind and chmod (its EMFILE
        spare descriptor aside: a port that never reserved one simply does not use it)."""
        self.connected = True
        self.socket = sock
        self.fileno = sock.fileno  # type: ignore[method-assign]
        self.numberAccepts = 100
        self.startReading()  # type: ignore[no-untyped-call]

    def stop_listening_keeping_path(self, reason: Any) -> None:
        """``connectionLost`` without ``unix.Port``'s unconditional unlink of the path."""
        tcp.Port.connectionLost(self, reason)


__all__ = [
    "INTERNALS",
    "AdoptedUnixPort",
    "HookedHTTPChannel",
    "Internal",
]
