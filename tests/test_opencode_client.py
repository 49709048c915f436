"""The opencode client and the session→directory registry, over treq's in-memory HTTP."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import pytest_twisted
from treq.client import HTTPClient
from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Factory
from twisted.internet.task import Clock
from twisted.logger import LogLevel
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.client import ResponseNeverReceived
from twisted.web.resource import Resource

from pigeond.config import Config
from pigeond.credentials import BasicAuth
from pigeond.delivery.opencode_client import (
    FailureKind,
    OpencodeClient,
    OpencodeError,
    SessionNotFound,
)
from pigeond.delivery.opencode_transcript import user_texts_of
from pigeond.delivery.registry import SessionDirectoryRegistry
from tests.http_helpers import failure_of, result_of, stub_client

URL = "http://opencode.test:4096"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeOpencodeResource(Resource):
    """Answers like opencode serve; ``hang`` holds every request open forever."""

    sessions: dict[str, str] = field(default_factory=lambda: {"ses_a": "/srv/projA"})
    prompt_status: int = 204
    session_body: bytes | None = None
    hang: bool = False
    seen: list[Seen] = field(default_factory=list)
    isLeaf = True

    def __post_init__(self) -> None:
        Resource.__init__(self)

    def render(self, request: server.Request) -> bytes | int:
        raw = request.content.read() if request.content else b""
        headers = {
            k.decode().lower(): v[0].decode() for k, v in request.requestHeaders.getAllRawHeaders()
        }
        path = (request.path or b"").decode()
        self.seen.append(
            Seen((request.method or b"").decode(), path, headers, json.loads(raw) if raw else None)
        )
        if self.hang:
            return server.NOT_DONE_YET
        parts = path.strip("/").split("/")
        session = parts[1] if len(parts) > 1 else ""
        if session not in self.sessions:
            request.setResponseCode(404)
            return b'{"name":"NotFoundError","data":{"message":"Session not found"}}'
        if len(parts) == 2:
            return (
                self.session_body
                or json.dumps({"id": session, "directory": self.sessions[session]}).encode()
            )
        request.setResponseCode(self.prompt_status)
        return b"" if self.prompt_status == 204 else b'{"name":"UnknownError"}'


def client_for(resource: Resource, clock: Clock, auth: BasicAuth | None = None) -> OpencodeClient:
    http = stub_client(resource)
    return OpencodeClient(http, URL + "/", clock, Config(handoff_timeout_s=30), auth=auth)


def run(clock: Clock, coro: Any) -> Deferred[Any]:
    return Deferred.fromCoroutine(coro)


def test_prompt_async_sends_directory_header_and_parts(clock: Clock) -> None:
    """prompt_async POSTs the text as one text part with the directory header."""
    fake = FakeOpencodeResource()
    result_of(run(clock, client_for(fake, clock).prompt_async("ses_a", "/srv/projA", ["hi"])))
    [seen] = fake.seen
    assert (seen.method, seen.path) == ("POST", "/session/ses_a/prompt_async")
    assert seen.headers["x-opencode-directory"] == "/srv/projA"
    assert seen.body == {"parts": [{"type": "text", "text": "hi"}]}


def test_basic_auth_when_password_set(clock: Clock) -> None:
    """With credentials every request carries HTTP Basic auth."""
    fake = FakeOpencodeResource()
    client = client_for(fake, clock, BasicAuth("opencode", "s3cret"))
    result_of(run(clock, client.session_directory("ses_a")))
    result_of(run(clock, client.prompt_async("ses_a", "/srv/projA", ["hi"])))
    expected = "Basic " + base64.b64encode(b"opencode:s3cret").decode()
    assert [s.headers.get("authorization") for s in fake.seen] == [expected, expected]


def test_no_auth_header_without_password(clock: Clock) -> None:
    """Without credentials no Authorization header is sent."""
    fake = FakeOpencodeResource()
    result_of(run(clock, client_for(fake, clock).session_directory("ses_a")))
    assert "authorization" not in fake.seen[0].headers


def test_prompt_404_is_session_not_found(clock: Clock) -> None:
    """A 404 from prompt_async raises SessionNotFound."""
    d = run(clock, client_for(FakeOpencodeResource(), clock).prompt_async("ses_x", "/d", ["hi"]))
    assert failure_of(d).check(SessionNotFound)


def test_prompt_500_is_error_with_status(clock: Clock) -> None:
    """A 5xx raises OpencodeError carrying the status and the answer's text."""
    fake = FakeOpencodeResource(prompt_status=500)
    failure = failure_of(run(clock, client_for(fake, clock).prompt_async("ses_a", "/d", ["hi"])))
    error = failure.value
    assert isinstance(error, OpencodeError) and not isinstance(error, SessionNotFound)
    assert error.status == 500 and "UnknownError" in str(error)


def test_session_directory(clock: Clock) -> None:
    """session_directory returns the directory opencode stored for the session."""
    d = run(clock, client_for(FakeOpencodeResource(), clock).session_directory("ses_a"))
    assert result_of(d) == "/srv/projA"


@pytest.mark.parametrize(
    "body", [b"{}", b"not json", b'{"directory": 3}', b'{"directory": "a\\nb"}']
)
def test_unusable_directory_is_error(clock: Clock, body: bytes) -> None:
    """An answer without a usable directory raises OpencodeError."""
    fake = FakeOpencodeResource(session_body=body)
    failure = failure_of(run(clock, client_for(fake, clock).session_directory("ses_a")))
    assert failure.check(OpencodeError)


def test_hung_server_hits_the_deadline(clock: Clock) -> None:
    """A server that never answers fails the call once the deadline passes."""
    client = client_for(FakeOpencodeResource(hang=True), clock)
    d = run(clock, client.prompt_async("ses_a", "/d", ["hi"]))
    clock.advance(29)
    assert not d.called
    clock.advance(1)
    failure = failure_of(d)
    assert failure.check(OpencodeError) and "30 s" in str(failure.value)


@dataclass
class CountingLookup:
    answers: dict[str, str] = field(default_factory=lambda: {"ses_a": "/srv/a"})
    calls: list[str] = field(default_factory=list)
    error: Exception | None = None

    async def session_directory(self, session_id: str) -> str:
        self.calls.append(session_id)
        if self.error is not None:
            raise self.error
        if session_id not in self.answers:
            raise SessionNotFound("gone")
        return self.answers[session_id]


def test_registry_caches_within_ttl(clock: Clock) -> None:
    """A directory is asked for once and served from cache until the TTL runs out."""
    lookup = CountingLookup()
    registry = SessionDirectoryRegistry(lookup, clock, Config(registry_ttl_s=300))
    assert result_of(run(clock, registry.resolve("ses_a"))) == "/srv/a"
    clock.advance(299)
    result_of(run(clock, registry.resolve("ses_a")))
    assert lookup.calls == ["ses_a"]
    clock.advance(1)
    result_of(run(clock, registry.resolve("ses_a")))
    assert lookup.calls == ["ses_a", "ses_a"]


def test_registry_404_invalidates(clock: Clock) -> None:
    """A 404 drops the cached entry and is raised to the caller."""
    lookup = CountingLookup()
    registry = SessionDirectoryRegistry(lookup, clock, Config(registry_ttl_s=300))
    result_of(run(clock, registry.resolve("ses_a")))
    registry.invalidate("ses_a")
    del lookup.answers["ses_a"]
    assert failure_of(run(clock, registry.resolve("ses_a"))).check(SessionNotFound)
    lookup.answers["ses_a"] = "/srv/a2"  # nothing of the 404 stays cached: asked again
    assert result_of(run(clock, registry.resolve("ses_a"))) == "/srv/a2"
    assert lookup.calls == ["ses_a", "ses_a", "ses_a"]


def test_registry_does_not_cache_errors(clock: Clock) -> None:
    """A failed lookup is not cached: the next resolve asks again."""
    lookup = CountingLookup(error=OpencodeError("refused"))
    registry = SessionDirectoryRegistry(lookup, clock, Config())
    failure_of(run(clock, registry.resolve("ses_a")))
    lookup.error = None
    assert result_of(run(clock, registry.resolve("ses_a"))) == "/srv/a"
    assert len(lookup.calls) == 2


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (502, FailureKind.OUTAGE),
        (503, FailureKind.OUTAGE),
        (504, FailureKind.OUTAGE),
        (401, FailureKind.OUTAGE),
        (400, FailureKind.PERMANENT),
        (500, FailureKind.ATTEMPT),
        (409, FailureKind.ATTEMPT),
    ],
)
def test_status_classes(clock: Clock, status: int, kind: FailureKind) -> None:
    """Gateway errors and refused credentials are outages, 400 is permanent, others cost."""
    fake = FakeOpencodeResource(prompt_status=status)
    failure = failure_of(run(clock, client_for(fake, clock).prompt_async("ses_a", "/d", ["x"])))
    assert isinstance(failure.value, OpencodeError) and failure.value.kind is kind


def test_timeout_spends_an_attempt(clock: Clock) -> None:
    """A call that times out after it was sent is not an outage: opencode may have it."""
    client = client_for(FakeOpencodeResource(hang=True), clock)
    d = run(clock, client.prompt_async("ses_a", "/d", ["hi"]))
    clock.advance(30)
    error = failure_of(d).value
    assert isinstance(error, OpencodeError) and error.kind is FailureKind.ATTEMPT


def test_prompt_with_several_parts(clock: Clock) -> None:
    """A batch is one prompt with one text part per envelope, in order."""
    fake = FakeOpencodeResource()
    result_of(run(clock, client_for(fake, clock).prompt_async("ses_a", "/d", ["one", "two"])))
    assert fake.seen[0].body == {
        "parts": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    }


class TranscriptResource(Resource):
    isLeaf = True

    def __init__(self, body: Any) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.body = body
        self.paths: list[str] = []
        self.directories: list[str | None] = []

    def render_GET(self, request: server.Request) -> bytes:
        self.paths.append(request.uri.decode())
        self.directories.append(request.getHeader("x-opencode-directory"))
        return json.dumps(self.body).encode()


def test_user_texts_of_a_read_are_its_user_text_parts(clock: Clock) -> None:
    """Only non-synthetic text parts of user messages are taken, oldest first."""
    transcript = [
        {"info": {"role": "user"}, "parts": [{"type": "text", "text": "one"},
                                             {"type": "text", "text": "hidden", "synthetic": True},
                                             {"type": "file", "url": "x"}]},
        {"info": {"role": "assistant"}, "parts": [{"type": "text", "text": "reply"}]},
        {"info": {"role": "user"}, "parts": [{"type": "text", "text": "two"}]},
        "garbage",
    ]  # fmt: skip
    fake = TranscriptResource(transcript)
    client = client_for(fake, clock)
    texts = user_texts_of(result_of(run(clock, client.messages("ses_a", "/srv/a", limit=50))))
    assert texts == ["one", "two"]
    assert fake.paths == ["/session/ses_a/message?limit=50"]
    assert fake.directories == ["/srv/a"]


def test_busy_sessions(clock: Clock) -> None:
    """GET /session/status lists busy sessions, asked with the directory header."""
    fake = TranscriptResource({"ses_a": {"type": "busy"}, "ses_b": {"type": "retry"}})
    client = client_for(fake, clock)
    assert result_of(run(clock, client.busy_sessions("/srv/a"))) == {
        "ses_a": "busy",
        "ses_b": "retry",
    }
    assert fake.directories == ["/srv/a"]


async def client_of_a_closed_port() -> OpencodeClient:
    """A client on the real reactor for a loopback port nothing listens on."""
    from twisted.internet import reactor
    from twisted.web.client import Agent

    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(Factory())
    number = port.getHost().port
    await port.stopListening()
    return OpencodeClient(
        HTTPClient(Agent(reactor)), f"http://127.0.0.1:{number}", reactor, Config()
    )


@pytest_twisted.ensureDeferred
async def test_refused_connection_is_an_outage() -> None:
    """Nothing listening on the port: an outage, not a spent attempt."""
    client = await client_of_a_closed_port()
    try:
        with pytest.raises(OpencodeError) as caught:
            await client.prompt_async("ses_a", "/d", ["hi"])
    finally:
        client.close()  # its outage would be probed on the test's reactor
    assert caught.value.kind is FailureKind.OUTAGE


@pytest_twisted.ensureDeferred
async def test_a_refused_connection_makes_opencode_unreachable_with_its_error() -> None:
    """A call that cannot connect starts an outage: unreachable, with the call's error."""
    client = await client_of_a_closed_port()
    try:
        with pytest.raises(OpencodeError):
            await client.session_directory("ses_a")
    finally:
        client.close()
    assert client.reachable is False
    assert client.reachability.last_error is not None
    assert client.reachability.last_error.startswith(
        "GET /session/ses_a: ConnectionRefusedError: Connection was refused by other side"
    )


def test_a_gateway_error_is_an_outage_until_opencode_answers(clock: Clock) -> None:
    """A 503 (a proxy without opencode behind it) makes opencode unreachable, with the
    call and its status; the next answer makes it reachable again."""
    fake = FakeOpencodeResource(prompt_status=503)
    client = client_for(fake, clock)
    failure_of(run(clock, client.prompt_async("ses_a", "/d", ["x"])))
    reach = client.reachability
    assert (client.reachable, reach.last_error) == (
        False,
        "POST /session/ses_a/prompt_async: HTTP 503",
    )
    result_of(run(clock, client.session_directory("ses_a")))
    assert (client.reachable, reach.last_error) == (True, None)


class StaleFirst:
    """An HTTP client whose first request meets a kept-alive connection the server had
    closed (no answer); every later one goes to ``resource``."""

    def __init__(self, resource: Resource) -> None:
        self._stub = stub_client(resource)
        self.stale = 1

    def request(self, method: str, url: str, **kwargs: Any) -> Deferred[Any]:
        if self.stale:
            self.stale -= 1
            return fail(ResponseNeverReceived([Failure(ConnectionDone())]))
        answer: Deferred[Any] = self._stub.request(method, url, **kwargs)
        return answer


def test_a_stale_kept_alive_connection_starts_no_outage(
    clock: Clock, log_events: list[tuple[LogLevel, str]]
) -> None:
    """A pooled connection that had gone stale is retried on a fresh one: opencode answered,
    so nothing says it was unreachable, not even for a moment."""
    http = cast(HTTPClient, StaleFirst(FakeOpencodeResource()))
    client = OpencodeClient(http, URL, clock, Config())
    assert result_of(run(clock, client.session_directory("ses_a"))) == "/srv/projA"
    assert client.reachable is True
    assert [text for level, text in log_events if level >= LogLevel.info] == []


def test_read_timeout_is_an_outage(clock: Clock) -> None:
    """A lookup that gets no answer delivered nothing: opencode is not serving yet."""
    client = client_for(FakeOpencodeResource(hang=True), clock)
    d = run(clock, client.session_directory("ses_a"))
    clock.advance(30)
    error = failure_of(d).value
    assert isinstance(error, OpencodeError) and error.kind is FailureKind.OUTAGE


class HeldLookup:
    """A directory lookup that answers only when the test fires its Deferred."""

    def __init__(self) -> None:
        self.held: dict[str, Deferred[str]] = {}

    async def session_directory(self, session_id: str) -> str:
        self.held[session_id] = Deferred()
        return await self.held[session_id]


def test_a_reload_raising_max_session_lookups_lets_waiting_lookups_go(clock: Clock) -> None:
    """Lookups beyond the cap wait for a slot; a reload with a higher cap starts them."""
    lookup = HeldLookup()
    registry = SessionDirectoryRegistry(lookup, clock, Config(max_session_lookups=1))
    resolving = [Deferred.fromCoroutine(registry.resolve(f"ses_{n}")) for n in range(3)]
    assert list(lookup.held) == ["ses_0"] and not registry.can_look_up_now("ses_9")
    registry.configure(Config(max_session_lookups=3))
    assert list(lookup.held) == ["ses_0", "ses_1", "ses_2"]
    for session, held in lookup.held.items():
        held.callback(f"/srv/{session}")
    assert [result_of(d) for d in resolving] == ["/srv/ses_0", "/srv/ses_1", "/srv/ses_2"]
    assert registry.asking == 0


def test_a_call_its_caller_cancels_is_cancelled_not_past_its_deadline(clock: Clock) -> None:
    """A call cancelled by its caller (a 2.x wait a steer ends) fails as cancelled, never
    as one that got no answer within its deadline."""
    client = client_for(FakeOpencodeResource(hang=True), clock)
    d = run(clock, client.exchange_bytes("POST", "/api/session/ses_a/wait", {}, b"", None))
    d.cancel()
    assert failure_of(d).check(CancelledError)
