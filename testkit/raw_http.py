"""Raw HTTP/1.1 for tests that must send what no HTTP client would: hostile requests, one
byte at a time, more connections than allowed.

:class:`Connection` drives our own Site in memory (a Clock runs its timers);
:func:`socket_exchange` and :class:`Trickler` talk to a real daemon on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from dataclasses import dataclass
from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IProtocol, ITCPTransport
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.web.server import Site
from zope.interface import implementer

PEER = IPv4Address("TCP", "127.0.0.1", 40000)


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))

    @property
    def is_json_error(self) -> bool:
        """An answer as the API gives its errors: JSON, with an ``error`` text."""
        if not self.headers.get("content-type", "").startswith("application/json"):
            return False
        try:
            body = self.json()
        except ValueError:
            return False
        return isinstance(body, dict) and isinstance(body.get("error"), str)


def parse_responses(raw: bytes) -> list[Response]:
    """Every whole response in ``raw`` (each must carry a Content-Length)."""
    responses = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        if not sep:
            break
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", len(rest)))
        responses.append(Response(int(status_line.split()[1]), headers, rest[:length]))
        raw = rest[length:]
    return responses


def parse_response(raw: bytes) -> Response:
    """The one response ``raw`` holds."""
    responses = parse_responses(raw)
    assert len(responses) == 1, f"expected one response, got {raw[:300]!r}"
    return responses[0]


@implementer(ITCPTransport)
class HalfCloseTransport(StringTransport):
    """An in-memory TCP connection that can be half-closed (``loseWriteConnection``)."""

    write_closed = False

    def loseWriteConnection(self) -> None:
        self.write_closed = True

    def getTcpNoDelay(self) -> bool:
        return True

    def setTcpNoDelay(self, enabled: bool) -> None:
        pass

    def getTcpKeepAlive(self) -> bool:
        return False

    def setTcpKeepAlive(self, enabled: bool) -> None:
        pass


class Connection:
    """One client connection to ``site``, in memory."""

    def __init__(self, site: Site, *, tcp: bool = False) -> None:
        protocol = site.buildProtocol(PEER)
        assert protocol is not None
        self.protocol: IProtocol = protocol
        self.transport: StringTransport = (
            HalfCloseTransport(peerAddress=PEER)  # type: ignore[no-untyped-call]
            if tcp
            else StringTransport(peerAddress=PEER)
        )
        self.protocol.makeConnection(self.transport)
        self._lost = False

    def send(self, data: bytes) -> None:
        self.protocol.dataReceived(data)

    def output(self) -> bytes:
        value: bytes = self.transport.value()
        return value

    def responses(self) -> list[Response]:
        return parse_responses(self.output())

    @property
    def closing(self) -> bool:
        """The server closed (or is closing) the connection."""
        return bool(self.transport.disconnecting)

    @property
    def aborted(self) -> bool:
        return bool(self.transport.disconnected)  # what StringTransport.abortConnection sets

    def close(self) -> None:
        """The client goes away (or the server's close completes)."""
        if not self._lost:
            self._lost = True
            self.protocol.connectionLost(Failure(ConnectionError("closed")))


# -- a real daemon over TCP ----------------------------------------------------------------


def _recv_answer(sock: socket.socket, deadline: float) -> bytes:
    """Read until the server closes or one whole response has come."""
    data = b""
    while (left := deadline - time.monotonic()) > 0:
        if _whole_response(data):
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            break  # what came before the reset is the answer
        if not chunk:
            break
        data += chunk
    return data


def _whole_response(data: bytes) -> bool:
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(rest) >= int(value)
    return False


def socket_exchange(port: int, request: bytes, timeout_s: float = 5.0) -> bytes:
    """Send ``request`` on a fresh connection and read its answer (until the server
    closes, a whole response came, or ``timeout_s``); a server that stops reading, or
    resets, ends the sending early."""
    deadline = time.monotonic() + timeout_s
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        # refused while sending: read the answer it sent
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
            sock.sendall(request)
        return _recv_answer(sock, deadline)


def health_probe(port: int, timeout_s: float = 1.0) -> tuple[Response | None, float]:
    """``GET /health`` on a fresh connection: the response (None if none came within
    ``timeout_s``, or the connection failed) and how long it took."""
    started = time.monotonic()
    try:
        raw = socket_exchange(
            port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", timeout_s
        )
    except OSError:
        return None, time.monotonic() - started
    elapsed = time.monotonic() - started
    responses = parse_responses(raw)
    return (responses[0] if responses else None), elapsed


class Trickler:
    """A slowloris connection: the start of a request that never ends, then ``trickle``
    now and then (by default a request head growing one byte at a time)."""

    def __init__(
        self,
        port: int,
        first: bytes = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
        trickle: bytes = b"a",
    ) -> None:
        self.opened = time.monotonic()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setblocking(False)
        self.trickle = trickle
        self.received = b""
        self.answered_at: float | None = None  # when the first byte of an answer came
        self.closed = False  # the server closed (FIN or reset)
        self.send(first)

    def send(self, data: bytes | None = None) -> None:
        """Send ``data`` (by default one more trickle), unless the server closed."""
        if self.closed:
            return
        try:
            self.sock.send(self.trickle if data is None else data)
        except BlockingIOError:
            pass
        except OSError:
            self.poll()
            self.closed = True

    def send_more(self) -> None:
        """One more trickle, while nothing has been answered."""
        if self.trickle and self.answered_at is None:
            self.send()

    def poll(self) -> None:
        """Read whatever the server sent, without waiting."""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                self.closed = True
                return
            if not chunk:
                self.closed = True
                return
            if self.answered_at is None:
                self.answered_at = time.monotonic()
            self.received += chunk

    def close(self) -> None:
        self.sock.close()
