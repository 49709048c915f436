"""The 2.x event stream as a hint (:mod:`pigeond.delivery.opencode_v2_events`), on a Clock:
opened only while opencode is found to be a 2.x, reopened with a bounded backoff, and what
its events tell the verifier and the permission watch."""

from __future__ import annotations

import json
from typing import Any, cast

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from pigeond.delivery.events import HEALTHY_S, RECONNECT_BACKOFF_S, ServerSentEvents
from pigeond.delivery.opencode_v2_events import SILENT_S, V2Events

URL = "http://127.0.0.1:4096"


class Verdict:
    """The dialect's verdict, as a test sets it."""

    def __init__(self, v2_version: str | None = "2.3.0") -> None:
        self._version = v2_version
        self.problem: str | None = None
        self._waiters: list[Deferred[None]] = []

    @property
    def v2_version(self) -> str | None:
        return self._version

    @v2_version.setter
    def v2_version(self, version: str | None) -> None:
        self._version = version
        if version is not None:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def when_v2(self) -> Deferred[None]:
        if self._version is not None:
            return succeed(None)
        self._waiters.append(Deferred())
        return self._waiters[-1]

    async def verdict(self) -> str | None:
        return self.problem


class Stream:
    """One opened stream: the body the reader was given, for the test to write and end."""

    def __init__(self) -> None:
        self.protocol: ServerSentEvents | None = None

    def deliverBody(self, protocol: ServerSentEvents) -> None:
        self.protocol = protocol
        protocol.makeConnection(StringTransport())  # type: ignore[no-untyped-call]

    def send(self, kind: str, **data: Any) -> None:
        assert self.protocol is not None
        event = {"id": "evt_1", "type": kind, "data": data}
        self.protocol.dataReceived(f"data: {json.dumps(event)}\n\n".encode())

    def closed(self) -> bool:
        """Whether the reader closed it."""
        assert self.protocol is not None
        transport = cast(StringTransport, self.protocol.transport)
        return transport.producerState == "stopped"

    def end(self) -> None:
        assert self.protocol is not None
        self.protocol.connectionLost()


class Source:
    """opencode's ``GET /api/event``: each open is recorded at its time; it fails while
    ``failing``."""

    base_url = URL

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.failing = False
        self.opened_at: list[float] = []
        self.streams: list[Stream] = []

    async def open_v2_event_stream(self) -> Stream:
        self.opened_at.append(self.clock.seconds())
        if self.failing:
            raise ConnectionError("GET /api/event answered HTTP 500")
        self.streams.append(Stream())
        return self.streams[-1]


class Outage:
    def __init__(self) -> None:
        self.down = False
        self.back: Deferred[None] = Deferred()

    def when_back(self) -> Deferred[None]:
        return self.back


def started(
    clock: Clock, verdict: Verdict, outages: Outage | None = None
) -> tuple[V2Events, Source, list[str], list[str]]:
    """A started stream, the idle sessions it told and its permission hints."""
    source = Source(clock)
    idle: list[str] = []
    hints: list[str] = []
    events = V2Events(source, verdict, clock, outages=outages)  # type: ignore[arg-type]
    events.listen(idle.append, lambda: hints.append("poll"))
    events.start()
    return events, source, idle, hints


def test_nothing_is_asked_while_opencode_is_not_found_to_be_a_2x() -> None:
    """A 1.x (or a server not recognised yet) is never asked for ``/api/event``; the stream
    opens the moment the verdict finds a 2.x."""
    clock = Clock()
    verdict = Verdict(None)
    _, source, _, _ = started(clock, verdict)
    clock.advance(600)
    assert source.opened_at == []
    verdict.v2_version = "2.3.0"
    assert source.opened_at == [600]


def test_a_session_going_idle_counts_a_turn_end_and_asks_for_a_look() -> None:
    """``session.idle`` (or a ``session.status`` idle) counts one turn end and tells the
    session; a second idle word with nothing between is the same end."""
    clock = Clock()
    events, source, idle, _ = started(clock, Verdict())
    before = events.turns_ended("ses_a")
    source.streams[0].send("session.status", sessionID="ses_a", status={"type": "busy"})
    source.streams[0].send("session.idle", sessionID="ses_a")
    source.streams[0].send("session.status", sessionID="ses_a", status={"type": "idle"})
    assert idle == ["ses_a"]
    assert before is not None and events.turns_ended("ses_a") == (before[0], before[1] + 1)
    assert events.turns_ended("ses_b") == before


def test_the_count_is_none_while_the_stream_is_down() -> None:
    """Down, the verifier cannot be told of turn ends: None (it looks every interval)."""
    clock = Clock()
    events, source, _, _ = started(clock, Verdict())
    assert events.turns_ended("ses_a") is not None
    source.failing = True
    source.streams[0].end()
    assert events.turns_ended("ses_a") is None
    assert not events.known_idle("ses_a")


def test_a_reconnect_changes_every_count() -> None:
    """Events may have been lost while the stream was down: every count differs after."""
    clock = Clock()
    events, source, _, _ = started(clock, Verdict())
    before = events.turns_ended("ses_a")
    clock.advance(HEALTHY_S + 1)
    source.streams[0].end()
    clock.advance(0)  # a stream that lasted is reopened at once
    after = events.turns_ended("ses_a")
    assert after is not None and after != before


def test_a_failing_stream_is_reopened_with_a_bounded_backoff() -> None:
    """A stream that fails soon after opening is opened again after each wait of the
    backoff in turn, the last one repeating."""
    clock = Clock()
    _, source, _, _ = started(clock, Verdict())
    source.failing = True
    source.streams[0].end()
    for _ in range(400):
        clock.advance(0.5)
    gaps = [b - a for a, b in zip(source.opened_at, source.opened_at[1:], strict=False)]
    assert gaps[: len(RECONNECT_BACKOFF_S)] == list(RECONNECT_BACKOFF_S)
    assert gaps[len(RECONNECT_BACKOFF_S) :] == [max(RECONNECT_BACKOFF_S)] * 5


def test_no_more_is_asked_once_opencode_is_no_longer_a_2x() -> None:
    """A 2.x replaced by a 1.x: its stream ends, and nothing more is asked under /api/."""
    clock = Clock()
    verdict = Verdict()
    _, source, _, _ = started(clock, verdict)
    verdict.v2_version = None
    source.streams[0].end()
    clock.advance(600)
    assert len(source.opened_at) == 1


def test_a_stream_still_open_after_the_verdict_changed_is_left() -> None:
    """An event that comes once opencode is no longer found to be a 2.x closes its stream
    and is not taken."""
    clock = Clock()
    verdict = Verdict()
    _, source, idle, _ = started(clock, verdict)
    verdict.v2_version = None
    source.streams[0].send("session.idle", sessionID="ses_a")
    assert idle == []
    assert source.streams[0].closed()


def test_an_unreachable_opencode_is_waited_for() -> None:
    """While opencode is out, the stream waits for its return, then opens at once."""
    clock = Clock()
    outage = Outage()
    _, source, _, _ = started(clock, Verdict(), outage)
    outage.down = True
    source.streams[0].end()
    clock.advance(600)
    assert len(source.opened_at) == 1
    outage.down = False
    outage.back.callback(None)
    assert len(source.opened_at) == 2


def test_permission_events_ask_the_watch_to_poll() -> None:
    """``permission.v2.asked`` and ``permission.v2.replied`` are hints to the permission
    poll; other events are not."""
    clock = Clock()
    _, source, _, hints = started(clock, Verdict())
    stream = source.streams[0]
    stream.send("permission.v2.asked", id="per_1", sessionID="ses_a", action="bash",
                resources=["ls"])  # fmt: skip
    stream.send("session.next.step.started", sessionID="ses_a")
    stream.send("permission.v2.replied", sessionID="ses_a", requestID="per_1", reply="once")
    assert hints == ["poll", "poll"]


def test_a_session_is_known_idle_only_until_anything_else_of_it_comes() -> None:
    """Idle is known from its idle word on, until a step, a busy status or a permission
    asked says a turn may run: a live turn's request is never taken for a stale one."""
    clock = Clock()
    events, source, _, _ = started(clock, Verdict())
    stream = source.streams[0]
    assert not events.known_idle("ses_a")
    stream.send("session.idle", sessionID="ses_a")
    assert events.known_idle("ses_a")
    stream.send("permission.v2.asked", id="per_1", sessionID="ses_a", action="bash",
                resources=["ls"])  # fmt: skip
    assert not events.known_idle("ses_a")


def test_a_silent_stream_is_opened_anew() -> None:
    """No 2.x heartbeat is known: a stream that sends nothing for SILENT_S is closed (a
    connection gone without closing would hide every turn end), to be opened again."""
    clock = Clock()
    _, source, _, _ = started(clock, Verdict())
    clock.advance(SILENT_S - 1)
    assert source.streams[0].closed() is False
    clock.advance(1)
    assert source.streams[0].closed() is True


def test_a_stream_that_speaks_is_kept() -> None:
    """Anything received puts the silence's end off."""
    clock = Clock()
    _, source, _, _ = started(clock, Verdict())
    for _ in range(3):
        clock.advance(SILENT_S - 1)
        source.streams[0].send("session.updated", sessionID="ses_a")
    assert source.streams[0].closed() is False


def test_stopping_ends_the_stream_and_every_wait() -> None:
    """Stopped, nothing more is opened and no call is left on the clock."""
    clock = Clock()
    events, source, _, _ = started(clock, Verdict())
    source.failing = True
    source.streams[0].end()
    clock.advance(RECONNECT_BACKOFF_S[0])
    events.stop()
    clock.advance(600)
    assert len(source.opened_at) == 2
    assert clock.getDelayedCalls() == []
