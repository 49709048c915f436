"""Hostile and malformed requests: every one gets a JSON 4xx, none a 500, an empty body or
a silent close, and none is logged as critical."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogEvent, LogLevel, globalLogPublisher
from twisted.web.server import Request, Site
from zope.interface import implementer

from pigeond.api.http_limits import LINGER_MAX_BYTES, LINGER_S
from pigeond.api.routes import SwarmRoutes
from pigeond.api.web import JsonApi, JsonResponse, make_site
from pigeond.config import Config
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.raw_http import Connection, Response, parse_response, socket_exchange

HUGE = "9" * 5000  # more digits than int() converts (4300)


def send_request(body: bytes, headers: bytes = b"") -> bytes:
    return (
        b"POST /swarm/send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + headers
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


def send_body(**fields: Any) -> bytes:
    body = {"from": "ses_a", "to": "ses_b", "payload": "hi"} | fields
    return json.dumps(body).encode()


def with_huge_ttl(sign: str = "") -> bytes:
    return send_request(send_body()[:-1] + f', "ttl_s": {sign}{HUGE}}}'.encode())


GET = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
POST = b"POST /swarm/send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"

# (id, request, status, words the error must contain)
PROTOCOL_ERRORS = [
    ("content-length-not-a-number", POST + b"Content-Length: abc\r\n\r\n", 400, "Content-Length"),
    ("content-length-negative", POST + b"Content-Length: -1\r\n\r\n", 400, "Content-Length"),
    ("content-length-list", POST + b"Content-Length: 5, 5\r\n\r\n", 400, "Content-Length"),
    (
        "content-length-huge",
        POST + b"Content-Length: " + HUGE.encode() + b"\r\n\r\n",
        413,
        "larger",
    ),
    (
        "chunked-garbage",
        POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        400,
        "chunked",
    ),
    (
        "chunk-size-line-too-long",
        POST + b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * 2000 + b"\r\n",
        400,
        "chunked",
    ),
    (
        "content-length-and-transfer-encoding",
        POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
        "more than once",
    ),
    (
        "transfer-encoding-and-content-length",
        POST + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        400,
        "more than once",
    ),
    (
        "content-length-twice",
        POST + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
        400,
        "more than once",
    ),
    ("transfer-encoding-gzip", POST + b"Transfer-Encoding: gzip\r\n\r\n", 400, "chunked"),
    ("request-line", b"GARBAGE\r\nHost: 127.0.0.1\r\n\r\n", 400, "request line"),
    ("header-without-colon", GET + b"NoColon\r\n\r\n", 400, "header"),
    ("header-with-nul", GET + b"X-A: a\x00b\r\n\r\n", 400, "header"),
    ("header-name-with-space", GET + b"Bad Name: x\r\n\r\n", 400, "header"),
    (
        "ten-thousand-headers",
        GET + b"".join(b"X-%d: y\r\n" % i for i in range(10_000)) + b"\r\n",
        431,
        "500 headers",
    ),
    (
        "headers-too-large",
        GET + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 1000) for i in range(40)) + b"\r\n",
        431,
        "16384 bytes",
    ),
    ("100-kb-header-line", GET + b"X-Long: " + b"a" * 100_000 + b"\r\n\r\n", 431, "header line"),
    (
        "100-kb-request-line",
        b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        414,
        "request line",
    ),
]

# what a real daemon must answer with JSON 4xx: the protocol errors and the huge numbers
HUGE_NUMBERS = [
    ("huge-ttl", with_huge_ttl(), 400, "ttl_s"),
    (
        "huge-limit",
        b"GET /swarm/inbox?session=ses_a&limit=" + HUGE.encode() + b" HTTP/1.1\r\n"
        b"Host: 127.0.0.1\r\n\r\n",
        400,
        "limit",
    ),
]
HOSTILE = PROTOCOL_ERRORS + HUGE_NUMBERS


@pytest.fixture
def site(repo: SwarmRepository, clock: Clock) -> Site:
    return make_site(
        SwarmRoutes(InlineDatabase(repo), clock, Config()).install(JsonApi()),
        Config(max_body_bytes=64 * 1024),
        reactor=clock,
    )


@pytest.fixture
def logged() -> Iterator[list[LogEvent]]:
    """Every log event while the test runs."""
    events: list[LogEvent] = []

    @implementer(ILogObserver)
    class Observe:
        def __call__(self, event: LogEvent) -> None:
            events.append(event)

    observe = Observe()
    globalLogPublisher.addObserver(observe)
    yield events
    globalLogPublisher.removeObserver(observe)


def exchange(site: Site, request: bytes) -> Response:
    connection = Connection(site)
    connection.send(request)
    response = parse_response(connection.output())
    connection.close()
    return response


# -- numbers of any length ----------------------------------------------------------------


@pytest.mark.parametrize("sign", ["", "-"])
def test_huge_integer_ttl_is_400_naming_the_field(site: Site, sign: str) -> None:
    """A ttl_s of 5,000 digits is a 400 that names ttl_s, not a 500."""
    response = exchange(site, with_huge_ttl(sign))
    assert response.status == 400 and "'ttl_s'" in response.json()["error"]


def test_huge_integer_in_an_unknown_field_is_ignored(site: Site, repo: SwarmRepository) -> None:
    """Unknown fields are ignored, however long a number they hold."""
    body = send_body()[:-1] + f', "extra": {HUGE}}}'.encode()
    response = exchange(site, send_request(body))
    assert response.status == 202 and repo.get(response.json()["msg_id"]) is not None


def test_huge_limit_is_400(site: Site) -> None:
    """A limit of 5,000 digits is a 400 about limit, not a 500."""
    request = b"GET /swarm/inbox?session=ses_a&limit=" + HUGE.encode() + b" HTTP/1.1\r\n"
    response = exchange(site, request + b"Host: x\r\n\r\n")
    assert response.status == 400 and "'limit'" in response.json()["error"]


def test_limit_with_leading_zeros_still_counts(site: Site) -> None:
    """Leading zeros do not make a limit too long: 000000000010 is 10."""
    request = b"GET /swarm/inbox?session=ses_a&limit=000000000010 HTTP/1.1\r\nHost: x\r\n\r\n"
    assert exchange(site, request).status == 200


# -- what Twisted refuses before any route runs ----------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "status", "words"),
    [pytest.param(r, s, w, id=i) for i, r, s, w in PROTOCOL_ERRORS],
)
def test_protocol_error_is_a_json_4xx(
    site: Site, request_bytes: bytes, status: int, words: str
) -> None:
    """Each malformed or oversized request gets its 4xx as ``{"error": ...}`` and a close."""
    connection = Connection(site)
    connection.send(request_bytes)
    response = parse_response(connection.output())
    assert (response.status, response.is_json_error) == (status, True)
    assert words in response.json()["error"]
    assert response.headers["connection"] == "close" and connection.closing


def test_nothing_after_a_refused_request_is_served(site: Site) -> None:
    """A request pipelined behind a malformed one is dropped, not answered."""
    connection = Connection(site)
    connection.send(b"GARBAGE\r\n\r\n" + GET + b"\r\n")
    assert [r.status for r in connection.responses()] == [400]


def test_form_body_is_not_parsed(site: Site) -> None:
    """A broken multipart body reaches the route as it is, not Twisted's form parser."""
    request = (
        b"POST /swarm/send HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: multipart/form-data; boundary=zz\r\nContent-Length: 9\r\n\r\n--garbage"
    )
    response = exchange(site, request)
    assert response.status == 400 and "not valid JSON" in response.json()["error"]


def test_hostile_requests_log_nothing_above_info(site: Site, logged: list[dict[str, Any]]) -> None:
    """No hostile request is logged as a warning, an error, or critical."""
    for _, request, _, _ in HOSTILE:
        exchange(site, request)
    loud = [e for e in logged if e.get("log_level", LogLevel.info) > LogLevel.info]
    assert loud == []


# -- closing after a refusal ------------------------------------------------------------------


def test_refusal_lingers_for_a_client_still_sending(site: Site, clock: Clock) -> None:
    """After a 431, what the client still sends is read and dropped, then the connection
    is aborted after the linger time."""
    connection = Connection(site, tcp=True)
    connection.send(GET + b"X-Long: " + b"a" * 100_000)
    answer = connection.output()
    connection.send(b"a" * 10_000)
    assert connection.transport.write_closed and not connection.closing  # type: ignore[attr-defined]
    assert connection.output() == answer
    clock.advance(LINGER_S)
    assert connection.aborted


def test_lingering_client_that_sends_too_much_is_aborted(site: Site) -> None:
    """A refused client that keeps sending more than the linger allows is aborted at once."""
    connection = Connection(site, tcp=True)
    connection.send(b"GARBAGE\r\n\r\n")
    connection.send(b"a" * (LINGER_MAX_BYTES + 1))
    assert connection.aborted


# -- against a real daemon --------------------------------------------------------------------


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One daemon for all hostile requests (starting one per request would be slow)."""
    tmp_path: Path = tmp_path_factory.mktemp("edge")
    factory = DaemonFactory(tmp_path)
    try:
        yield factory.start(tmp_path / "p.db", opencode_url="")
    finally:
        factory.close()


def with_token(daemon: DaemonProcess, request: bytes) -> bytes:
    """The request with the daemon's bearer token after its request line."""
    line, _, rest = request.partition(b"\r\n")
    return line + b"\r\nAuthorization: Bearer " + daemon.token.encode() + b"\r\n" + rest


@pytest.mark.slow
@pytest.mark.parametrize(
    ("request_bytes", "status", "words"),
    [pytest.param(r, s, w, id=i) for i, r, s, w in HOSTILE],
)
def test_daemon_answers_hostile_request_with_json_4xx(
    daemon: DaemonProcess, request_bytes: bytes, status: int, words: str
) -> None:
    """Over a real socket, each hostile request gets its JSON 4xx before the close."""
    raw = socket_exchange(daemon.port, with_token(daemon, request_bytes))
    response = parse_response(raw)
    assert (response.status, response.is_json_error) == (status, True), raw[:300]
    assert words in response.json()["error"]


@pytest.mark.slow
def test_daemon_logs_no_critical_for_hostile_requests(daemon: DaemonProcess) -> None:
    """After every hostile request, the daemon has logged nothing critical and still serves."""
    for _, request, _, _ in HOSTILE:
        socket_exchange(daemon.port, with_token(daemon, request))
    raw = socket_exchange(daemon.port, GET + b"Connection: close\r\n\r\n")
    assert parse_response(raw).status == 200
    output = daemon.output()
    assert "critical" not in output and "Traceback" not in output, output[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "repeated",
    [
        b"Host: evil.com\r\nHost: 127.0.0.1\r\n",
        b"Host: 127.0.0.1\r\nAuthorization: Bearer " + b"x" * 43 + b"\r\n",
    ],
    ids=["two-hosts", "two-authorizations"],
)
def test_daemon_refuses_a_repeated_host_or_authorization(
    daemon: DaemonProcess, repeated: bytes
) -> None:
    """Over a real socket, a second Host or Authorization gets 400 and is not served."""
    request = (
        b"GET /swarm/inbox?session=ses_a HTTP/1.1\r\n" + repeated + b"Connection: close\r\n\r\n"
    )
    response = parse_response(socket_exchange(daemon.port, with_token(daemon, request)))
    assert (response.status, response.is_json_error) == (400, True)
    assert "more than one" in response.json()["error"]


def test_a_started_site_sets_no_timer(site: Site, clock: Clock) -> None:
    """Listening, the site schedules nothing: an idle daemon is not woken for an access
    log's timestamp (it writes no access log)."""
    site.doStart()
    try:
        assert clock.getDelayedCalls() == []
    finally:
        site.doStop()


def test_an_answer_for_a_client_that_hung_up_is_dropped(
    clock: Clock, logged: list[dict[str, Any]]
) -> None:
    """A handler still waiting when its client hangs up finishes; its answer goes nowhere."""
    waiting: Deferred[None] = Deferred()
    finished = []

    async def slow(request: Request) -> JsonResponse:
        await waiting
        finished.append(True)
        return JsonResponse(200, {"ok": True})

    api = JsonApi()
    api.route("GET", "/slow", slow)
    connection = Connection(make_site(api, Config(), reactor=clock))
    connection.send(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    connection.close()
    waiting.callback(None)
    assert finished == [True]
    assert connection.output() == b""
    assert not api.answering
    assert [e for e in logged if e.get("log_level", LogLevel.info) >= LogLevel.warn] == []
