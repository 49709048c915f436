"""opencode's event stream: parsing, and one live connection that reconnects."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
import pytest_twisted
from treq.client import HTTPClient
from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.task import Clock, deferLater
from twisted.internet.testing import StringTransport
from twisted.logger import LogLevel
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.client import Agent
from twisted.web.resource import Resource

from pigeond.config import Config
from pigeond.delivery import events
from pigeond.delivery.events import (
    RECONNECT_BACKOFF_S,
    EventStream,
    ServerSentEvents,
    session_status_of,
)
from pigeond.delivery.opencode_client import OpencodeClient
from pigeond.delivery.reachability import OpencodeReachability
from tests.http_helpers import result_of, stub_client

BUSY = {"type": "session.status", "properties": {"sessionID": "ses_a", "status": {"type": "busy"}}}
IDLE = {"type": "session.idle", "properties": {"sessionID": "ses_a"}}


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"directory": "/p", "payload": BUSY}, ("ses_a", "busy")),
        (BUSY, ("ses_a", "busy")),
        ({"directory": "/p", "payload": IDLE}, ("ses_a", "idle")),
        ({"payload": {"type": "message.updated", "properties": {"sessionID": "ses_a"}}}, None),
        ({"payload": {"type": "session.status", "properties": {"sessionID": 3}}}, None),
        ({"payload": {"type": "session.status", "properties": {"sessionID": "s"}}}, None),
        ({"payload": "nonsense"}, None),
        ([1, 2], None),
    ],
)
def test_session_status_of(event: Any, expected: tuple[str, str] | None) -> None:
    """Status events of both stream shapes are read; anything else is ignored."""
    assert session_status_of(event) == expected


def feed(chunks: list[bytes]) -> list[str]:
    got: list[str] = []
    protocol = ServerSentEvents(got.append, lambda: None)
    for chunk in chunks:
        protocol.dataReceived(chunk)
    return got


def test_sse_events_split_across_chunks() -> None:
    """An event split over several reads is delivered once, whole."""
    assert feed([b'data: {"a"', b": 1}\n", b"\n", b"data: 2\n\n"]) == ['{"a": 1}', "2"]


def test_sse_crlf_and_comments() -> None:
    """CRLF line ends, comments and other fields are handled."""
    assert feed([b": keepalive\r\nevent: x\r\ndata: 1\r\n\r\n"]) == ["1"]


def test_sse_multiline_data() -> None:
    """Several data lines make one event joined by newlines."""
    assert feed([b"data: a\ndata: b\n\n"]) == ["a\nb"]


class EventSource(Resource):
    """A /global/event endpoint whose open streams the test writes to."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.streams: list[server.Request] = []
        self.opened: Deferred[None] = Deferred()

    def render_GET(self, request: server.Request) -> int:
        request.setHeader(b"content-type", b"text/event-stream")
        request.write(b": connected\n\n")
        self.streams.append(request)
        opened, self.opened = self.opened, Deferred()
        opened.callback(None)
        return server.NOT_DONE_YET

    def send(self, event: dict[str, Any]) -> None:
        self.streams[-1].write(b"data: " + json.dumps({"payload": event}).encode() + b"\n\n")

    def drop(self) -> None:
        self.streams[-1].finish()


@pytest_twisted.ensureDeferred
async def test_stream_reports_statuses_and_reconnects() -> None:
    """Statuses arrive through one connection; a dropped stream is reopened."""
    source = EventSource()
    port = await TCP4ServerEndpoint(global_reactor, 0, interface="127.0.0.1").listen(
        server.Site(source)
    )
    url = f"http://127.0.0.1:{port.getHost().port}"
    client = OpencodeClient(HTTPClient(Agent(global_reactor)), url, global_reactor, Config())
    statuses: list[tuple[str, str]] = []
    connected: list[bool] = []
    got_two: Deferred[None] = Deferred()

    def on_status(session: str, status: str) -> None:
        statuses.append((session, status))
        if len(statuses) == 2:
            got_two.callback(None)

    stream = EventStream(client, global_reactor, on_status, connected.append, backoff_s=(0.05,))
    first_open = source.opened
    stream.start()
    try:
        await first_open
        await deferLater(global_reactor, 0.05, lambda: None)
        source.send(BUSY)
        source.send(IDLE)
        await got_two
        assert statuses == [("ses_a", "busy"), ("ses_a", "idle")]
        reopened = source.opened
        source.drop()
        await reopened
        assert len(source.streams) == 2 and connected[:2] == [True, False]
    finally:
        stream.stop()
        await port.stopListening()
        for request in source.streams:
            if not request.finished:
                request.finish()


class AnsweringStream(Resource):
    """A /global/event that answers 200 and an empty stream at once."""

    isLeaf = True

    def render_GET(self, request: server.Request) -> bytes:
        request.setHeader(b"content-type", b"text/event-stream")
        return b""


def test_a_connected_stream_shows_opencode_reachable() -> None:
    """Once the event stream's request is answered 200, opencode counts as reachable (the
    status line no longer says "not contacted yet")."""
    stream = AnsweringStream()  # type: ignore[no-untyped-call]  # Resource.__init__
    client = OpencodeClient(stub_client(stream), "http://opencode.test:4096", Clock(), Config())
    assert client.reachable is None
    result_of(Deferred.fromCoroutine(client.open_event_stream()))
    assert client.reachable is True


class FakeStreamResponse:
    """A 200 ``/global/event`` answer whose body stays open until :meth:`drop`."""

    def __init__(self) -> None:
        self.protocol: ServerSentEvents | None = None

    def deliverBody(self, protocol: ServerSentEvents) -> None:
        self.protocol = protocol
        protocol.makeConnection(StringTransport())  # type: ignore[no-untyped-call]

    def drop(self) -> None:
        assert self.protocol is not None
        self.protocol.connectionLost(Failure(ConnectionDone()))


class StoppableOpencode:
    """opencode's event stream and status route on a Clock, for a stream that follows its
    reachability: while ``up`` is False every call is refused (and told as the client tells
    it); the clock time of each call is kept."""

    base_url = "http://127.0.0.1:4096"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.up = True
        self.calls: list[float] = []
        self.streams: list[FakeStreamResponse] = []
        self.reach = OpencodeReachability(self.base_url, clock, self.probe)

    def _call(self, what: str) -> None:
        self.calls.append(self.clock.seconds())
        if not self.up:
            self.reach.failed(f"{what}: ConnectionRefusedError")
            raise ConnectionRefusedError(what)
        self.reach.answered()

    async def open_event_stream(self) -> FakeStreamResponse:
        self._call("GET /global/event")
        self.streams.append(FakeStreamResponse())
        return self.streams[-1]

    async def probe(self) -> None:
        try:
            self._call("GET /session/status")
        except ConnectionRefusedError:
            return  # told to reach, as the client's probe does


def stream_following(opencode: StoppableOpencode, connected: list[bool]) -> EventStream:
    source = cast(events.EventSource, opencode)
    return EventStream(
        source, opencode.clock, lambda s, st: None, connected.append, outages=opencode.reach
    )


def outage_of(opencode: StoppableOpencode, seconds: float) -> None:
    """opencode stops (its stream drops) for ``seconds``, passed in small steps."""
    opencode.up = False
    opencode.streams[-1].drop()
    for _ in range(round(seconds / 0.05)):
        opencode.clock.advance(0.05)


def test_the_stream_reconnects_within_two_seconds_of_opencodes_return(clock: Clock) -> None:
    """After a ten-minute outage the stream is open again at most 2 s after opencode is."""
    opencode = StoppableOpencode(clock)
    connected: list[bool] = []
    stream_following(opencode, connected).start()
    outage_of(opencode, 600)
    assert connected == [True, False]
    came_back = clock.seconds()
    opencode.up = True
    while connected[-1] is False:
        clock.advance(0.05)
    assert clock.seconds() - came_back <= 2.05
    assert len(opencode.streams) == 2


def test_the_stream_makes_no_calls_of_its_own_while_opencode_is_down(clock: Clock) -> None:
    """During an outage only the probe asks: the stream tries once, then waits for the return."""
    opencode = StoppableOpencode(clock)
    stream_following(opencode, []).start()
    outage_of(opencode, 600)
    # the first open, its reopen when it dropped, then the probes alone
    assert len(opencode.calls) == 2 + opencode.reach.probes


def test_an_outage_logs_nothing_from_the_stream(
    clock: Clock, log_events: list[tuple[LogLevel, str]]
) -> None:
    """The stream's drop, its retry and its reconnect are debug lines: reachability says
    the outage (its two lines are the only ones)."""
    opencode = StoppableOpencode(clock)
    stream_following(opencode, []).start()
    outage_of(opencode, 60)
    opencode.up = True
    clock.advance(2.5)
    said = [text for level, text in log_events if level >= LogLevel.info]
    assert len(said) == 3
    assert said[0] == "event stream connected: http://127.0.0.1:4096/global/event"
    assert said[1].startswith("opencode at http://127.0.0.1:4096 unreachable")
    assert said[2].startswith("opencode at http://127.0.0.1:4096 answers again after")


class RefusingStream(StoppableOpencode):
    """opencode answers every call but refuses its event stream (HTTP 500)."""

    async def open_event_stream(self) -> FakeStreamResponse:
        self.calls.append(self.clock.seconds())
        self.reach.answered()
        raise ConnectionError("GET /global/event answered HTTP 500")


def test_a_stream_refused_while_opencode_answers_is_one_warning(
    clock: Clock, log_events: list[tuple[LogLevel, str]]
) -> None:
    """The stream's own trouble is said once, its retries backed off up to the last wait."""
    opencode = RefusingStream(clock)
    stream_following(opencode, []).start()
    for _ in range(1200):
        clock.advance(0.5)
    said = [(level, text) for level, text in log_events if level >= LogLevel.info]
    assert said == [
        (LogLevel.warn, "event stream down (ConnectionError: GET /global/event answered HTTP"
                        " 500); reconnecting every 30 s at most, polling turns meanwhile"),
    ]  # fmt: skip
    assert len(opencode.calls) <= 6 + 600 / RECONNECT_BACKOFF_S[-1]


class StaleOnce(StoppableOpencode):
    """The stream's first request meets a kept connection the server had closed (no answer,
    nothing told to reachability); later ones open."""

    async def open_event_stream(self) -> FakeStreamResponse:
        if not self.calls:
            self.calls.append(self.clock.seconds())
            raise ConnectionError("ResponseNeverReceived: connection lost")
        return await super().open_event_stream()


def test_one_failed_open_is_tried_again_without_a_warning(
    clock: Clock, log_events: list[tuple[LogLevel, str]]
) -> None:
    """A stream that could not be opened once (a stale kept connection) opens on the next
    try, and the log says only that it connected."""
    opencode = StaleOnce(clock)
    connected: list[bool] = []
    stream_following(opencode, connected).start()
    clock.advance(RECONNECT_BACKOFF_S[0])
    assert connected == [True]
    said = [text for level, text in log_events if level >= LogLevel.info]
    assert said == ["event stream connected: http://127.0.0.1:4096/global/event"]


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"directory": "/p", "payload": {"type": "permission.asked", "properties": {}}}, True),
        ({"type": "permission.replied", "properties": {}}, True),
        ({"payload": {"type": "permission.updated"}}, False),
        ({"payload": BUSY}, False),
        ("nonsense", False),
    ],
)
def test_is_permission_event(event: Any, expected: bool) -> None:
    """permission.asked and permission.replied, of either stream shape, go to the watch."""
    assert events.is_permission_event(event) is expected


@pytest_twisted.ensureDeferred
async def test_the_stream_passes_permission_events_on_whole() -> None:
    """A permission event reaches on_permission as it came (the envelope's directory too)."""
    source = EventSource()
    port = await TCP4ServerEndpoint(global_reactor, 0, interface="127.0.0.1").listen(
        server.Site(source)
    )
    url = f"http://127.0.0.1:{port.getHost().port}"
    client = OpencodeClient(HTTPClient(Agent(global_reactor)), url, global_reactor, Config())
    got: Deferred[dict[str, Any]] = Deferred()
    stream = EventStream(
        client, global_reactor, lambda s, t: None, lambda c: None, on_permission=got.callback
    )
    asked = {"type": "permission.asked", "properties": {"id": "per_1", "sessionID": "ses_a"}}
    first_open = source.opened
    stream.start()
    try:
        await first_open
        await deferLater(global_reactor, 0.05, lambda: None)
        source.send(asked)
        assert await got == {"payload": asked}
    finally:
        stream.stop()
        await port.stopListening()
        for request in source.streams:
            if not request.finished:
                request.finish()
