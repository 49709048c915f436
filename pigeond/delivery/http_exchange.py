"""A lean HTTP/1.1 client for pigeond's calls to ``opencode serve``: keep-alive connections
to the one server, one request at a time on each.

Why not treq and twisted.web's Agent: on the hand-off path one call through them cost
about 500 µs of CPU (URL parsing with IDNA checks, an endpoint and a pool lookup per
call, header objects, the content decoder), where writing a request and reading its
answer costs about 150 µs.  At 1,000 hand-offs a second that difference is a third of a
core.  opencode's API is plain HTTP/1.1 JSON on one host, so this does only that:
``Content-Length``, chunked and close-delimited answers, 1xx answers skipped, no
redirects followed (a 3xx is returned like any status), no compression asked for.
The event stream, one request that stays open, still goes through treq.

Failures are Twisted's own exceptions, so :mod:`pigeond.delivery.opencode_client`
classifies them as it does treq's: a connection that cannot be made raises the
endpoint's ``ConnectError`` (or ``DNSLookupError``); one closed before any byte of an
answer raises ``ResponseNeverReceived`` (a pooled connection may have gone stale: the
caller tries once more); one closed in the middle of an answer ``ResponseFailed``.
Cancelling a call (its deadline) aborts its connection, which is never reused.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from urllib.parse import quote, urlsplit

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
    connectProtocol,
)
from twisted.internet.interfaces import IReactorTCP, IStreamClientEndpoint
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.web.client import ResponseFailed, ResponseNeverReceived

from pigeond.credentials import BasicAuth

# connections kept open between calls: as many as calls under way at once, about one per
# target with a hand-off in flight (a connection made per call costs more than the call)
DEFAULT_MAX_IDLE = 128
_PATH_SAFE = "/?=&%:@!$'()*+,;~-._"  # what a path and query keep as they are
_NO_BODY_STATUSES = frozenset({204, 304})
# An answer's status line and headers: opencode's are a few hundred bytes.  Bytes past
# this without the blank line that ends them are not an HTTP answer (a wrong port, a
# server gone astray), and are not buffered without end.
MAX_HEAD = 64 * 1024


class _BadAnswer(Exception):
    """The server's bytes are not an HTTP/1.1 answer we can read."""


class _AnswerParser:
    """Reads one answer from the bytes of a connection; :meth:`feed` says when it is whole."""

    def __init__(self, head_only: bool) -> None:
        self._buffer = bytearray()
        self._head_only = head_only  # HEAD: an answer without a body
        self.status: int | None = None
        self.persistent = False
        self._length: int | None = None  # body bytes, when known
        self._chunked = False
        self._chunks = bytearray()
        self.body = b""

    @property
    def started(self) -> bool:
        return self.status is not None or bool(self._buffer)

    def feed(self, data: bytes) -> bool:
        """Add bytes; True once the whole answer is here (extra bytes are an error)."""
        self._buffer += data
        while self.status is None:
            if not self._read_head():
                return False
        if self._chunked:
            return self._read_chunks()
        if self._length is None:
            return False  # delimited by the connection's close: see :meth:`closed`
        if len(self._buffer) < self._length:
            return False
        if len(self._buffer) > self._length:
            raise _BadAnswer("bytes after the answer")
        self.body = bytes(self._buffer)
        return True

    def closed(self) -> bool:
        """The connection closed: whether that completed a close-delimited answer."""
        if self.status is not None and not self._chunked and self._length is None:
            self.body = bytes(self._buffer)
            return True
        return False

    def _read_head(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD:
                raise _BadAnswer(f"no end of the answer's head within {MAX_HEAD} bytes")
            return False
        lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        del self._buffer[: end + 4]
        version, _, rest = lines[0].partition(" ")
        if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
            raise _BadAnswer(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(rest[:3])
        if 100 <= status < 200:
            return True  # an interim answer (100 Continue): the real one follows
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.status = status
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        self.persistent = version == "HTTP/1.1" and "close" not in tokens
        if self._head_only or status in _NO_BODY_STATUSES:
            self._length = 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked = True
        elif "content-length" in headers:
            try:
                self._length = int(headers["content-length"])
            except ValueError as e:
                raise _BadAnswer(f"bad Content-Length {headers['content-length']!r}") from e
        else:
            self.persistent = False  # the body ends where the connection does
        return True

    def _read_chunks(self) -> bool:
        buffer = self._buffer
        while True:
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                return False
            try:
                size = int(bytes(buffer[:line_end]).split(b";")[0], 16)
            except ValueError as e:
                raise _BadAnswer("bad chunk size") from e
            if size == 0:  # the last chunk, then trailers (seldom any) and an empty line
                if buffer.find(b"\r\n\r\n", line_end) < 0:
                    return False
                self.body = bytes(self._chunks)
                return True
            if len(buffer) < line_end + 2 + size + 2:
                return False
            self._chunks += buffer[line_end + 2 : line_end + 2 + size]
            del buffer[: line_end + 2 + size + 2]


class _Connection(Protocol):
    """One keep-alive connection; at most one call on it at a time."""

    def __init__(self, owner: HttpExchange) -> None:
        self.owner = owner
        self.waiting: Deferred[tuple[int, bytes]] | None = None
        self.parser: _AnswerParser | None = None
        self.gone = False

    def call(self, request: bytes, head_only: bool) -> Deferred[tuple[int, bytes]]:
        assert self.waiting is None and self.transport is not None
        self.parser = _AnswerParser(head_only)
        self.waiting = Deferred(lambda d: self.abort())
        self.transport.write(request)
        return self.waiting

    def abort(self) -> None:
        self.gone = True
        self.waiting = None  # cancelled: the Deferred has its CancelledError already
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    def dataReceived(self, data: bytes) -> None:
        parser, waiting = self.parser, self.waiting
        if parser is None or waiting is None:
            self.abort()  # bytes nobody asked for: this connection is not to be trusted
            return
        try:
            done = parser.feed(data)
        except _BadAnswer as e:
            self.fail(ResponseFailed([Failure(e)]))
            self.abort()
            return
        if done:
            self.finish(parser, reusable=parser.persistent)

    def finish(self, parser: _AnswerParser, *, reusable: bool) -> None:
        waiting, self.waiting, self.parser = self.waiting, None, None
        assert waiting is not None and parser.status is not None
        if reusable and not self.gone:
            self.owner._idle_again(self)
        elif self.transport is not None and not self.gone:
            self.gone = True
            self.transport.loseConnection()
        waiting.callback((parser.status, parser.body))

    def fail(self, error: Exception) -> None:
        waiting, self.waiting, self.parser = self.waiting, None, None
        if waiting is not None:
            waiting.errback(Failure(error))

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        self.gone = True
        self.owner._lost(self)
        parser = self.parser
        if self.waiting is None or parser is None:
            return
        if parser.closed():
            self.finish(parser, reusable=False)
        elif parser.started:
            self.fail(ResponseFailed([reason]))
        else:
            self.fail(ResponseNeverReceived([reason]))


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ") if "\r" in text or "\n" in text else text


def _endpoint(
    reactor: IReactorTCP, host: str, port: int, timeout_s: float
) -> IStreamClientEndpoint:
    """A plain TCP endpoint for an IP address (a name goes through HostnameEndpoint, whose
    name resolution costs more than the call when run for each new connection)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return HostnameEndpoint(reactor, host, port, timeout=timeout_s)
    if address.version == 4:
        return TCP4ClientEndpoint(reactor, host, port, timeout=timeout_s)
    return TCP6ClientEndpoint(reactor, host, port, timeout=timeout_s)


class HttpExchange:
    """Calls to one ``http://`` server (``base_url``, whose path prefixes every path)."""

    def __init__(
        self,
        reactor: IReactorTCP,
        base_url: str,
        *,
        connect_timeout_s: float = 10.0,
        auth: BasicAuth | None = None,
        max_idle: int = DEFAULT_MAX_IDLE,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"only http:// URLs, not {base_url!r}")
        self._endpoint = _endpoint(reactor, parts.hostname, parts.port or 80, connect_timeout_s)
        self._prefix = parts.path.rstrip("/")
        fixed = f"host: {parts.netloc}\r\n"
        if auth is not None:
            token = base64.b64encode(f"{auth.username}:{auth.password}".encode()).decode()
            fixed += f"authorization: Basic {token}\r\n"
        self._fixed_headers = fixed
        self._max_idle = max_idle
        self._idle: list[_Connection] = []

    async def request(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
        *,
        fresh: bool = False,
    ) -> tuple[int, bytes]:
        """One call: the answer's status and body; ``fresh``: on a new connection, not a
        kept one.  ``headers`` must not repeat ``host``, ``authorization`` or
        ``content-length``.  As with treq, the path is percent-encoded where it must be
        and a line break in a header becomes a space: nothing can add a header."""
        target = quote(self._prefix + path, safe=_PATH_SAFE)
        lines = [f"{method} {target} HTTP/1.1\r\n", self._fixed_headers]
        lines += [f"{_one_line(k)}: {_one_line(v)}\r\n" for k, v in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"content-length: {len(body or b'')}\r\n")
        request = "".join(lines).encode("utf-8") + b"\r\n" + (body or b"")
        connection = await self._connection(fresh)
        return await connection.call(request, head_only=method == "HEAD")

    async def _connection(self, fresh: bool) -> _Connection:
        while self._idle and not fresh:
            connection = self._idle.pop()
            if not connection.gone:
                return connection
        connection = _Connection(self)
        await connectProtocol(self._endpoint, connection)
        return connection

    def _idle_again(self, connection: _Connection) -> None:
        if len(self._idle) < self._max_idle:
            self._idle.append(connection)
        elif connection.transport is not None:
            connection.gone = True
            connection.transport.loseConnection()

    def _lost(self, connection: _Connection) -> None:
        if connection in self._idle:
            self._idle.remove(connection)

    def close(self) -> None:
        """Close the idle connections (at shutdown); calls under way end by themselves."""
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.gone = True
            if connection.transport is not None:
                connection.transport.loseConnection()
