"""The lean HTTP/1.1 client of the calls to opencode, against a scripted server on 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
import pytest_twisted
from twisted.internet import error as neterror
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Factory, Protocol
from twisted.web.client import ResponseFailed, ResponseNeverReceived

from pigeond.config import Config
from pigeond.credentials import BasicAuth
from pigeond.delivery.http_exchange import MAX_HEAD, HttpExchange
from pigeond.delivery.opencode_client import FailureKind, OpencodeClient, OpencodeError
from testkit.polling import PATIENCE_S

Action = bytes | Callable[["Scripted"], None]
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


def hang(protocol: Scripted) -> None:
    """Answer nothing."""


def close(protocol: Scripted) -> None:
    """Close the connection without answering."""
    assert protocol.transport is not None
    protocol.transport.loseConnection()


def answer_and_close(data: bytes) -> Callable[[Scripted], None]:
    """Write ``data``, then close the connection."""

    def act(protocol: Scripted) -> None:
        assert protocol.transport is not None
        protocol.transport.write(data)
        protocol.transport.loseConnection()

    return act


@dataclass
class Script(Factory):
    """Answers the n-th request with ``answers[n]``; records requests and connections."""

    answers: list[Action] = field(default_factory=list)
    requests: list[tuple[int, bytes, bytes]] = field(default_factory=list)  # conn, head, body
    connections: int = 0
    lost: int = 0

    def buildProtocol(self, addr: object) -> Scripted:
        self.connections += 1
        return Scripted(self, self.connections)


class Scripted(Protocol):
    def __init__(self, script: Script, number: int) -> None:
        self.script = script
        self.number = number
        self.buffer = b""

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        head, found, rest = self.buffer.partition(b"\r\n\r\n")
        if not found:
            return
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(rest) < length:
            return
        self.buffer = rest[length:]
        self.script.requests.append((self.number, head, rest[:length]))
        answer = self.script.answers.pop(0)
        if isinstance(answer, bytes):
            assert self.transport is not None
            self.transport.write(answer)
        else:
            answer(self)

    def connectionLost(self, reason: object = None) -> None:
        self.script.lost += 1


@dataclass
class Server:
    script: Script
    port: IListeningPort

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port.getHost().port}"  # type: ignore[attr-defined]


@contextlib.asynccontextmanager
async def scripted_server() -> AsyncIterator[Server]:
    script = Script()
    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(script)
    try:
        yield Server(script, port)
    finally:
        stopped = port.stopListening()  # None when the test stopped it already
        if stopped is not None:
            await stopped


def sleep(seconds: float) -> Deferred[None]:
    d: Deferred[None] = Deferred()
    reactor.callLater(seconds, d.callback, None)
    return d


async def until(check: Callable[[], object], what: str) -> None:
    """Let the reactor run (the scripted server is on it too) until ``check()`` is true."""
    deadline = reactor.seconds() + PATIENCE_S
    while not check():
        if reactor.seconds() >= deadline:
            raise AssertionError(f"timed out after {PATIENCE_S:g} s waiting for {what}")
        await sleep(0.01)


@pytest_twisted.ensureDeferred
async def test_answers_by_length_by_chunks_and_by_close() -> None:
    """Kept-alive answers reuse one connection; a close-delimited one is read to the end."""
    async with scripted_server() as server:
        server.script.answers = [
            OK,
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n"
            b"0\r\ntrailer: 1\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
            answer_and_close(b"HTTP/1.0 200 OK\r\n\r\nuntil close"),
        ]
        exchange = HttpExchange(reactor, server.url)
        assert await exchange.request("GET", "/a", {}) == (200, b"ok")
        assert await exchange.request("GET", "/b", {}) == (200, b"abcde")
        assert await exchange.request("POST", "/c", {}, b"{}") == (204, b"")
        assert await exchange.request("GET", "/d", {}) == (200, b"until close")
        assert [number for number, _, _ in server.script.requests] == [1, 1, 1, 1]
        assert await _then(exchange, server, OK) == (200, b"ok")
        assert server.script.connections == 2  # the closed one was not used again
        exchange.close()


async def _then(exchange: HttpExchange, server: Server, answer: bytes) -> tuple[int, bytes]:
    server.script.answers.append(answer)
    return await exchange.request("GET", "/next", {})


@pytest_twisted.ensureDeferred
async def test_request_has_host_auth_length_and_the_url_path() -> None:
    """The base URL's path prefixes the call's; Basic auth and Content-Length are sent."""
    async with scripted_server() as server:
        server.script.answers = [OK]
        exchange = HttpExchange(reactor, server.url + "/base/", auth=BasicAuth("u", "p:w"))
        await exchange.request("POST", "/session/s/prompt_async", {"x-opencode-directory": "/d"},
                               b'{"parts":[]}')  # fmt: skip
        _, head, body = server.script.requests[0]
        lines = head.decode().split("\r\n")
        assert lines[0] == "POST /base/session/s/prompt_async HTTP/1.1"
        headers = dict(line.split(": ", 1) for line in lines[1:])
        assert headers["host"] == server.url.removeprefix("http://")
        assert headers["authorization"] == "Basic " + base64.b64encode(b"u:p:w").decode()
        assert headers["x-opencode-directory"] == "/d"
        assert headers["content-length"] == "12" and body == b'{"parts":[]}'
        exchange.close()


@pytest_twisted.ensureDeferred
async def test_closed_before_any_answer_and_in_the_middle() -> None:
    """No byte of an answer: ResponseNeverReceived; part of one: ResponseFailed."""
    async with scripted_server() as server:
        server.script.answers = [
            close,
            answer_and_close(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\npart"),
        ]  # fmt: skip
        exchange = HttpExchange(reactor, server.url)
        with pytest.raises(ResponseNeverReceived):
            await exchange.request("GET", "/a", {})
        with pytest.raises(ResponseFailed):
            await exchange.request("GET", "/b", {})


@pytest_twisted.ensureDeferred
async def test_a_stale_kept_connection_is_tried_again_on_a_fresh_one() -> None:
    """The server drops a kept connection as the next call goes out: the client tries that
    call once more on a new connection, and it succeeds."""
    async with scripted_server() as server:
        server.script.answers = [OK, close, b"HTTP/1.1 204 No Content\r\n\r\n"]
        exchange = HttpExchange(reactor, server.url)
        client = OpencodeClient(None, server.url, reactor, Config(), exchange=exchange)  # type: ignore[arg-type]
        await exchange.request("GET", "/warm", {})
        await client.prompt_async("ses_a", "/d", ["hi"])
        assert [number for number, _, _ in server.script.requests] == [1, 1, 2]
        exchange.close()


@pytest_twisted.ensureDeferred
async def test_a_cancelled_call_drops_its_connection() -> None:
    """A call cut by its deadline aborts its connection, which is never used again."""
    async with scripted_server() as server:
        server.script.answers = [hang, OK]
        exchange = HttpExchange(reactor, server.url)
        call = Deferred.fromCoroutine(exchange.request("GET", "/slow", {}))
        await until(lambda: server.script.requests, "the request at the server")
        call.cancel()
        with pytest.raises(CancelledError):
            await call
        assert await exchange.request("GET", "/next", {}) == (200, b"ok")
        assert server.script.connections == 2
        exchange.close()


@pytest_twisted.ensureDeferred
async def test_deadline_and_refused_connection_are_classified() -> None:
    """Through OpencodeClient: a hung prompt spends an attempt; a refused connection is an
    outage, as with treq."""
    async with scripted_server() as server:
        server.script.answers = [hang]
        config = Config(handoff_timeout_s=0.2)
        exchange = HttpExchange(reactor, server.url)
        client = OpencodeClient(None, server.url, reactor, config, exchange=exchange)  # type: ignore[arg-type]
        with pytest.raises(OpencodeError) as caught:
            await client.prompt_async("ses_a", "/d", ["hi"])
        assert caught.value.kind is FailureKind.ATTEMPT
        url = server.url
        stopped = server.port.stopListening()
        assert stopped is not None
        await stopped
        gone = HttpExchange(reactor, url)
        with pytest.raises(neterror.ConnectError):
            await gone.request("GET", "/x", {})
        client = OpencodeClient(None, url, reactor, config, exchange=gone)  # type: ignore[arg-type]
        try:
            with pytest.raises(OpencodeError) as caught:
                await client.session_directory("ses_a")
        finally:
            client.close()  # its outage would be probed on the test's reactor
        assert caught.value.kind is FailureKind.OUTAGE


@pytest_twisted.ensureDeferred
async def test_close_drops_the_idle_connections() -> None:
    async with scripted_server() as server:
        server.script.answers = [OK]
        exchange = HttpExchange(reactor, server.url)
        await exchange.request("GET", "/a", {})
        exchange.close()
        await until(lambda: server.script.lost, "the connection to close")
        assert server.script.lost == 1


def test_only_plain_http() -> None:
    with pytest.raises(ValueError):
        HttpExchange(reactor, "https://127.0.0.1:4096")


@pytest_twisted.ensureDeferred
async def test_nothing_can_add_a_header_or_break_the_request_line() -> None:
    """A line break in a header value becomes a space; the path is percent-encoded."""
    async with scripted_server() as server:
        server.script.answers = [OK]
        exchange = HttpExchange(reactor, server.url)
        await exchange.request("GET", "/a b/é?limit=5", {"x-opencode-directory": "/d\r\nx: y"})
        _, head, _ = server.script.requests[0]
        lines = head.decode().split("\r\n")
        assert lines[0] == "GET /a%20b/%C3%A9?limit=5 HTTP/1.1"
        assert "x-opencode-directory: /d  x: y" in lines and len(lines) == 3
        exchange.close()


@pytest_twisted.ensureDeferred
async def test_an_answer_head_without_end_is_refused_not_buffered() -> None:
    """A server that sends bytes without ever ending the head: ResponseFailed, and the
    connection is dropped once the head passes MAX_HEAD bytes."""
    async with scripted_server() as server:
        server.script.answers = [b"HTTP/1.1 200 OK\r\nx: " + b"y" * (MAX_HEAD + 1)]
        exchange = HttpExchange(reactor, server.url)
        with pytest.raises(ResponseFailed):
            await exchange.request("GET", "/a", {})
        assert server.script.connections == 1
