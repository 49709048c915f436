"""opencode's event stream: parsing, and one live connection that reconnects."""

from __future__ import annotations

import json
from typing import Any

import pytest
import pytest_twisted
from treq.client import HTTPClient
from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.task import Clock, deferLater
from twisted.web import server
from twisted.web.client import Agent
from twisted.web.resource import Resource

from pigeond.config import Config
from pigeond.delivery.events import EventStream, ServerSentEvents, session_status_of
from pigeond.delivery.opencode_client import OpencodeClient
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
