"""The arbiter, on a fake clock with an in-memory opencode whose answers the test controls."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.arbiter import BACKOFF_SCHEDULE_S, Arbiter, backoff_after
from pigeond.opencode_client import OpencodeError, SessionNotFound
from pigeond.storage import SwarmRepository
from tests.messages import new_message

TICK_S = 0.5


@dataclass
class Prompt:
    target: str
    directory: str
    text: str
    answer: Deferred[None]


@dataclass
class FakeOpencode:
    """prompt_async parks on a Deferred per call; the test fires it."""

    prompts: list[Prompt] = field(default_factory=list)
    in_flight: dict[str, int] = field(default_factory=dict)
    most_in_flight: dict[str, int] = field(default_factory=dict)

    async def prompt_async(self, session_id: str, directory: str, text: str) -> None:
        prompt = Prompt(session_id, directory, text, Deferred())
        self.prompts.append(prompt)
        self.in_flight[session_id] = self.in_flight.get(session_id, 0) + 1
        self.most_in_flight[session_id] = max(
            self.most_in_flight.get(session_id, 0), self.in_flight[session_id]
        )
        try:
            await prompt.answer
        finally:
            self.in_flight[session_id] -= 1

    def pending(self) -> list[Prompt]:
        return [p for p in self.prompts if not p.answer.called]

    def succeed_all(self) -> None:
        for prompt in self.pending():
            prompt.answer.callback(None)

    def fail_all(self, error: Exception) -> None:
        for prompt in self.pending():
            prompt.answer.errback(error)


@dataclass
class FakeRegistry:
    directories: dict[str, str] = field(default_factory=dict)
    invalidated: list[str] = field(default_factory=list)

    async def resolve(self, session_id: str) -> str:
        return self.directories.get(session_id, f"/work/{session_id}")

    def invalidate(self, session_id: str) -> None:
        self.invalidated.append(session_id)


@dataclass
class Harness:
    repo: SwarmRepository
    clock: Clock
    opencode: FakeOpencode
    registry: FakeRegistry
    arbiter: Arbiter

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def send(self, to: str = "ses_target", **kwargs: str) -> str:
        message = new_message(to, **kwargs)
        self.repo.accept(message, self.now_ms())
        return message.msg_id

    def state(self, msg_id: str) -> str:
        stored = self.repo.get(msg_id)
        assert stored is not None
        return stored.state


@pytest.fixture
def h(repo: SwarmRepository, clock: Clock) -> Harness:
    opencode, registry = FakeOpencode(), FakeRegistry()
    arbiter = Arbiter(repo, registry, opencode, clock, tick_s=TICK_S, max_attempts=10)
    return Harness(repo, clock, opencode, registry, arbiter)


def test_one_prompt_in_flight_per_target(h: Harness) -> None:
    """However many sends, kicks and ticks, one target never has two prompts in flight."""
    h.arbiter.start()
    for i in range(5):
        h.send(msg_id=f"msg_{i}")
        h.arbiter.kick("ses_target")
    for _ in range(10):
        h.clock.advance(TICK_S)
    assert len(h.opencode.pending()) == 1
    while h.opencode.pending():
        h.opencode.succeed_all()
        h.clock.advance(TICK_S)
    assert h.opencode.most_in_flight["ses_target"] == 1
    assert [h.state(f"msg_{i}") for i in range(5)] == ["handed_off"] * 5


def test_targets_drain_in_parallel(h: Harness) -> None:
    """Different targets each get their own prompt in flight at the same time."""
    h.send("ses_a")
    h.send("ses_b")
    h.arbiter.start()
    assert sorted(p.target for p in h.opencode.pending()) == ["ses_a", "ses_b"]


def test_new_message_is_dispatched_without_waiting_for_tick(h: Harness) -> None:
    """A kick hands off a due message at once, before any tick."""
    h.send(msg_id="msg_1")
    h.arbiter.kick("ses_target")
    assert [p.target for p in h.opencode.pending()] == ["ses_target"]


def test_success_marks_handed_off_and_drains_next(h: Harness) -> None:
    """After a 2xx the message is handed_off and the next one goes out in the same drain."""
    h.send(msg_id="msg_1")
    h.send(msg_id="msg_2")
    h.arbiter.kick("ses_target")
    h.opencode.succeed_all()
    assert h.state("msg_1") == "handed_off"
    assert "msg_2" in h.opencode.pending()[0].text


def test_prompt_carries_envelope_and_directory(h: Harness) -> None:
    """The prompt is the rendered envelope, sent with the registry's directory."""
    h.registry.directories["ses_target"] = "/home/dev/project"
    h.send(msg_id="msg_1", payload="do <this>")
    h.arbiter.kick("ses_target")
    prompt = h.opencode.pending()[0]
    assert prompt.directory == "/home/dev/project"
    assert prompt.text.startswith('<swarm_message v="1" kind="chat" from="ses_sender"')
    assert "\ndo &lt;this&gt;\n" in prompt.text


def test_priority_then_fifo_on_a_backlog(h: Harness) -> None:
    """A backlog built while the arbiter was off goes out urgent, normal, low; FIFO within."""
    for msg_id, priority in [
        ("msg_l1", "low"),
        ("msg_n1", "normal"),
        ("msg_u1", "urgent"),
        ("msg_n2", "normal"),
        ("msg_u2", "urgent"),
        ("msg_l2", "low"),
    ]:
        h.send(msg_id=msg_id, priority=priority)
    h.arbiter.start()
    order = []
    while pending := h.opencode.pending():
        order.append(pending[0].text.split('msg_id="')[1].split('"')[0])
        h.opencode.succeed_all()
    assert order == ["msg_u1", "msg_u2", "msg_n1", "msg_n2", "msg_l1", "msg_l2"]


def test_failure_counts_attempt_and_backs_off(h: Harness) -> None:
    """A failed hand-off counts an attempt, records the error and waits the first backoff."""
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    h.opencode.fail_all(OpencodeError("HTTP 500: boom", 500))
    stored = h.repo.get(msg_id)
    assert stored is not None
    assert (stored.state, stored.attempts, stored.last_error) == ("queued", 1, "HTTP 500: boom")
    assert stored.next_retry_at == h.now_ms() + 1000


def test_failing_target_pauses_until_retry_time(h: Harness) -> None:
    """After a failure the target gets nothing until its retry time, then the same message."""
    first = h.send(msg_id="msg_1")
    h.send(msg_id="msg_2")
    h.arbiter.start()
    h.opencode.fail_all(OpencodeError("down"))
    h.clock.advance(TICK_S)
    assert h.opencode.pending() == []
    h.clock.advance(1.0 - TICK_S)
    [retry] = h.opencode.pending()
    assert f'msg_id="{first}"' in retry.text


def test_backoff_schedule() -> None:
    """Retries wait 1, 2, 5, 15, then 60 s for every later attempt."""
    assert [backoff_after(n) for n in range(1, 9)] == [1, 2, 5, 15, 60, 60, 60, 60]
    assert BACKOFF_SCHEDULE_S == (1, 2, 5, 15, 60)


def test_fails_for_good_after_max_attempts(h: Harness) -> None:
    """The tenth failed attempt makes the message failed; nothing is sent after that."""
    msg_id = h.send()
    h.arbiter.start()
    for _ in range(10):
        h.opencode.fail_all(OpencodeError("HTTP 500"))
        h.clock.advance(60)
    stored = h.repo.get(msg_id)
    assert stored is not None
    assert (stored.state, stored.attempts, stored.next_retry_at) == ("failed", 10, None)
    assert len(h.opencode.prompts) == 10
    h.clock.advance(3600)
    assert len(h.opencode.prompts) == 10


def test_retries_follow_backoff_times(h: Harness) -> None:
    """Each retry happens at the scheduled time after the previous failure."""
    h.send()
    h.arbiter.start()
    start = h.clock.seconds()
    times = []
    for _ in range(5):
        times.append(h.clock.seconds() - start)
        h.opencode.fail_all(OpencodeError("HTTP 500"))
        while not h.opencode.pending():
            h.clock.advance(TICK_S)
    assert times == [0, 1, 3, 8, 23]


def test_session_not_found_invalidates_directory(h: Harness) -> None:
    """A 404 for the session drops its cached directory so the next try asks again."""
    h.send()
    h.arbiter.kick("ses_target")
    h.opencode.fail_all(SessionNotFound("gone", 404))
    assert h.registry.invalidated == ["ses_target"]


def test_tick_survives_storage_errors(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception inside a tick is logged; the LoopingCall keeps running."""
    calls = []

    def broken(now_ms: int) -> list[str]:
        calls.append(now_ms)
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(h.repo, "ready_targets", broken)
    h.arbiter.start()
    h.clock.advance(TICK_S)
    h.clock.advance(TICK_S)
    assert len(calls) == 3 and h.arbiter.running


def test_unexpected_error_frees_the_target(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug inside a drain is logged and does not leave the target marked in flight."""

    async def broken(session_id: str) -> str:
        raise ZeroDivisionError

    h.send()
    monkeypatch.setattr(h.registry, "resolve", broken)
    monkeypatch.setattr(h.repo, "record_failed_attempt", lambda *a: 1 / 0)
    h.arbiter.kick("ses_target")
    assert h.arbiter.in_flight_targets() == []


def test_stop_waits_for_in_flight(h: Harness) -> None:
    """stop() fires only once the hand-off in flight has finished, and is recorded."""
    msg_id = h.send()
    h.arbiter.start()
    stopped: list[None] = []
    h.arbiter.stop().addCallback(stopped.append)
    assert stopped == []
    h.opencode.succeed_all()
    assert stopped == [None]
    assert h.state(msg_id) == "handed_off"


def test_stopped_arbiter_sends_nothing(h: Harness) -> None:
    """After stop() neither ticks nor kicks send anything."""
    h.arbiter.start()
    h.arbiter.stop()
    h.send()
    h.arbiter.kick("ses_target")
    h.clock.advance(5)
    assert h.opencode.prompts == []


def test_message_not_due_is_not_sent(h: Harness) -> None:
    """A message waiting out its backoff is not sent by a kick."""
    msg_id = h.send()
    h.repo.record_failed_attempt(msg_id, "x", h.now_ms(), h.now_ms() + 5000)
    h.arbiter.kick("ses_target")
    assert h.opencode.prompts == []
