"""The arbiter, on a fake clock with an in-memory opencode whose answers the test controls."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from twisted.application.internet import TimerService
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import LogLevel

from pigeond.config import Config
from pigeond.delivery.arbiter import (
    BACKOFF_SCHEDULE_S,
    Arbiter,
    DeliveryPolicy,
    ModeSource,
    backoff_after,
)
from pigeond.delivery.opencode_client import FailureKind, OpencodeError, SessionNotFound
from pigeond.delivery.prompt_mode import DEFAULT_MODE
from pigeond.delivery.sweeper import ExpirySweeper
from pigeond.delivery.turns import TurnTracker
from pigeond.storage import StorageUnavailable, SwarmRepository
from pigeond.storage.database import InlineDatabase
from tests.arbiter_harness import OUTAGE_S, TICK_S, Harness, SlowModes, make_harness
from tests.http_helpers import result_of
from tests.storage_helpers import reopened

pytestmark = pytest.mark.both_backends


@pytest.fixture
def h(repo: SwarmRepository, clock: Clock) -> Harness:
    return make_harness(repo, clock)


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
        order += pending[0].msg_ids()
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
    assert len(h.prompts_to("ses_target")) == 10
    h.clock.advance(3600)
    assert len(h.prompts_to("ses_target")) == 10


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
    h.opencode.fail_all(SessionNotFound("gone"))
    assert h.registry.invalidated == ["ses_target"]


def test_tick_survives_storage_errors(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception inside a tick is logged; the LoopingCall keeps running."""
    calls = []

    def broken(repo: SwarmRepository, now_ms: int) -> list[str]:
        calls.append(now_ms)
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(SwarmRepository, "ready_targets", broken)
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
    monkeypatch.setattr(SwarmRepository, "record_failed_attempt", lambda *a: 1 / 0)
    h.arbiter.kick("ses_target")
    assert h.arbiter.in_flight_targets() == []


def test_our_bug_is_not_charged_to_the_message(
    h: Harness, monkeypatch: pytest.MonkeyPatch, log_events: list[tuple[LogLevel, str]]
) -> None:
    """A TypeError in a drain is logged with its traceback, spends no attempt, tells no
    sender, and holds the target for outage_retry_s; then delivery goes on."""
    calls = [0]
    resolve = h.registry.resolve

    async def buggy_once(session_id: str) -> str:
        calls[0] += 1
        if calls[0] == 1:
            raise TypeError("unsupported operand")
        return await resolve(session_id)

    monkeypatch.setattr(h.registry, "resolve", buggy_once)
    msg_id = h.send()
    h.arbiter.start()
    stored = h.repo.get(msg_id)
    assert stored is not None and (stored.state, stored.attempts) == ("queued", 0)
    assert (LogLevel.critical, "delivery to ses_target hit an error") in log_events  # + traceback
    h.clock.advance(OUTAGE_S - TICK_S)
    assert h.opencode.prompts == []  # held, not retried every tick
    h.clock.advance(TICK_S)
    assert [p.msg_ids() for p in h.opencode.prompts] == [[msg_id]]


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


def test_backlog_goes_in_one_batch(repo: SwarmRepository, clock: Clock) -> None:
    """A backlog is handed over as one prompt, one text part per envelope, in order."""
    h = make_harness(repo, clock, batch_max=10)
    ids = [h.send(priority=p) for p in ("low", "normal", "urgent")]
    h.arbiter.kick("ses_target")
    [prompt] = h.opencode.pending()
    assert prompt.msg_ids() == [ids[2], ids[1], ids[0]]
    h.opencode.succeed_all()
    seqs = [h.repo.get(i).handoff_seq for i in reversed(ids)]  # type: ignore[union-attr]
    assert seqs == [1, 2, 3] and {h.state(i) for i in ids} == {"handed_off"}


def test_batch_is_bounded(repo: SwarmRepository, clock: Clock) -> None:
    """No prompt carries more than batch_max envelopes."""
    h = make_harness(repo, clock, batch_max=2)
    for _ in range(5):
        h.send()
    h.arbiter.kick("ses_target")
    sizes = []
    while pending := h.opencode.pending():
        sizes.append(len(pending[0].texts))
        h.opencode.succeed_all()
    assert sizes == [2, 2, 1]


def test_outage_holds_without_spending_attempts(h: Harness) -> None:
    """An outage failure while opencode itself answers (reachability not down: a folder, an
    API it cannot use): the message waits outage_retry_s, attempts stay 0."""
    msg_id = h.send()
    h.arbiter.start()
    for _ in range(3):
        h.opencode.fail_all(OpencodeError("refused", kind=FailureKind.OUTAGE))
        stored = h.repo.get(msg_id)
        assert stored is not None
        assert (stored.state, stored.attempts, stored.last_error) == ("queued", 0, "refused")
        assert stored.next_retry_at == h.now_ms() + int(OUTAGE_S * 1000)
        h.clock.advance(OUTAGE_S)
    assert len(h.prompts_to("ses_target")) == 4


def outage_harness(repo: SwarmRepository, clock: Clock) -> tuple[Harness, list[bool]]:
    """An arbiter whose view of opencode's reachability the test sets (``down[0]``)."""
    down = [False]
    return make_harness(repo, clock, opencode_down=lambda: down[0]), down


def test_during_an_outage_of_opencode_a_failed_hand_off_stays_due(
    repo: SwarmRepository, clock: Clock
) -> None:
    """opencode unreachable: the message is due at once, no attempt spent, not held for
    outage_retry_s: the end of the outage lets it go."""
    h, down = outage_harness(repo, clock)
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    down[0] = True
    h.opencode.fail_all(OpencodeError("GET /session/x: refused", kind=FailureKind.OUTAGE))
    stored = h.repo.get(msg_id)
    assert stored is not None
    assert (stored.state, stored.attempts, stored.next_retry_at) == ("queued", 0, h.now_ms())


def tried_in_an_outage(h: Harness, down: list[bool]) -> None:
    """opencode goes down as a message waits: its try fails as an outage."""
    down[0] = True
    h.send()
    h.arbiter.start()
    h.opencode.fail_all(OpencodeError("GET /session/x: refused", kind=FailureKind.OUTAGE))


def test_in_an_outage_of_opencode_a_target_is_tried_once_per_outage_retry(
    repo: SwarmRepository, clock: Clock
) -> None:
    """Ticks and sends find the message due, but its target is tried again only after
    outage_retry_s (the probe, not the targets, finds opencode's return)."""
    h, down = outage_harness(repo, clock)
    tried_in_an_outage(h, down)
    h.arbiter.kick("ses_target")
    h.clock.pump([TICK_S] * int(OUTAGE_S / TICK_S - 1))
    assert len(h.prompts_to("ses_target")) == 1
    h.clock.pump([TICK_S] * 2)
    assert len(h.prompts_to("ses_target")) == 2


def test_the_end_of_an_outage_hands_off_at_once(repo: SwarmRepository, clock: Clock) -> None:
    """opencode_back drains every due target then and there, not at the next tick nor
    after outage_retry_s."""
    h, down = outage_harness(repo, clock)
    tried_in_an_outage(h, down)
    down[0] = False
    h.arbiter.opencode_back()
    assert len(h.prompts_to("ses_target")) == 2


def test_bad_request_fails_at_once(h: Harness) -> None:
    """A permanent error (HTTP 400) fails the message at once, with the reason."""
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    h.opencode.fail_all(OpencodeError("HTTP 400: bad", 400, FailureKind.PERMANENT))
    stored = h.repo.get(msg_id)
    assert stored is not None
    assert (stored.state, stored.attempts, stored.last_error) == ("failed", 1, "HTTP 400: bad")


def test_session_gone_after_fresh_lookup_fails_at_once(h: Harness) -> None:
    """A 404 confirmed by a fresh registry lookup fails the message at once."""
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    h.registry.gone.add("ses_target")
    h.opencode.fail_all(SessionNotFound("HTTP 404"))
    stored = h.repo.get(msg_id)
    assert stored is not None and stored.state == "failed"
    assert stored.last_error is not None and "session not found" in stored.last_error


def test_unknown_session_fails_without_prompt(h: Harness) -> None:
    """A session opencode does not know fails at once; no prompt is sent."""
    h.registry.gone.add("ses_target")
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    assert h.state(msg_id) == "failed" and h.opencode.prompts == []


def test_404_but_session_still_there_spends_an_attempt(h: Harness) -> None:
    """A 404 that a fresh lookup contradicts is an ordinary failed attempt."""
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    h.opencode.fail_all(SessionNotFound("HTTP 404"))
    stored = h.repo.get(msg_id)
    assert stored is not None and (stored.state, stored.attempts) == ("queued", 1)


def test_missing_directory_holds_as_outage(repo: SwarmRepository, clock: Clock) -> None:
    """A session whose directory is gone is held without an attempt and without a prompt."""
    h = make_harness(repo, clock, missing_dirs=frozenset({"/work/ses_target"}))
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    stored = h.repo.get(msg_id)
    assert stored is not None and (stored.state, stored.attempts) == ("queued", 0)
    assert stored.last_error == "/work/ses_target does not exist"
    assert h.opencode.prompts == []


def test_failure_notifies_the_sender(h: Harness) -> None:
    """A message that fails for good queues a delivery.failed notice to its sender."""
    msg_id = h.send(sender="ses_alice")
    h.arbiter.kick("ses_target")
    h.opencode.fail_all(OpencodeError("HTTP 400: bad", 400, FailureKind.PERMANENT))
    h.arbiter.tick()
    [notice] = h.prompts_to("ses_alice")
    assert notice.text.startswith(
        '<swarm_message v="1" kind="delivery.failed" from="pigeond" to="ses_alice"'
    )
    assert f'reply_to="{msg_id}"' in notice.text
    assert "ses_target" in notice.text and "HTTP 400: bad" in notice.text


def test_a_notice_nobody_can_take_is_dropped_and_tells_nobody(h: Harness) -> None:
    """When a notice itself fails (its addressee is no live session) it ends 'dropped', not
    'failed': the failed count is the one real failure, and nobody is notified."""
    h.send(sender="ses_alice")
    h.registry.gone.update({"ses_target", "ses_alice"})
    h.arbiter.kick("ses_target")
    h.arbiter.tick()
    h.arbiter.tick()
    assert h.repo.count_by_state() == {"failed": 1, "dropped": 1}


def test_no_notice_for_a_non_session_sender(h: Harness) -> None:
    """A sender that is not a session (a script) gets no notice."""
    h.send(sender="ci-bot")
    h.registry.gone.add("ses_target")
    h.arbiter.kick("ses_target")
    assert h.repo.count_by_state() == {"failed": 1}


def test_expired_message_does_not_block_the_queue(h: Harness) -> None:
    """An expired message is skipped, the one behind it goes out, and the sweep makes it
    expired and tells its sender (whose notice the next tick hands off)."""
    old = h.send(expires_at=h.now_ms() - 1, sender="ses_alice")
    live = h.send()
    h.arbiter.start()
    assert [p.msg_ids() for p in h.prompts_to("ses_target")] == [[live]]
    result_of(ExpirySweeper(InlineDatabase(h.repo), h.clock).sweep())
    assert h.state(old) == "expired"
    h.clock.advance(TICK_S)
    assert len(h.prompts_to("ses_alice")) == 1


def test_message_expires_while_held(h: Harness) -> None:
    """A message held by an outage expires at its time to live and stops retrying."""
    msg_id = h.send(expires_at=h.now_ms() + 45_000)
    sweeping = TimerService(TICK_S, ExpirySweeper(InlineDatabase(h.repo), h.clock).sweep)
    sweeping.clock = h.clock
    sweeping.startService()
    h.arbiter.start()
    h.opencode.fail_all(OpencodeError("refused", kind=FailureKind.OUTAGE))
    h.clock.advance(OUTAGE_S)
    h.opencode.fail_all(OpencodeError("refused", kind=FailureKind.OUTAGE))
    h.clock.advance(OUTAGE_S)
    assert h.state(msg_id) == "expired"
    assert len(h.prompts_to("ses_target")) == 2


@dataclass
class NoBusySessions:
    async def busy_sessions(self, directory: str) -> dict[str, str]:
        return {}


def turn_harness(repo: SwarmRepository, clock: Clock, batch_max: int = 10) -> Harness:
    turns = TurnTracker(clock, NoBusySessions(), Config(busy_window_s=5, turn_timeout_s=600))
    turns.stream_state(True)
    turns.observe("ses_target", "idle")
    return make_harness(repo, clock, batch_max=batch_max, turns=turns)


def test_turn_mode_waits_for_the_turn_to_end(repo: SwarmRepository, clock: Clock) -> None:
    """In turn delivery the next prompt goes out only after the previous turn ended."""
    h = turn_harness(repo, clock)
    turns = h.turns
    assert turns is not None
    h.send()
    h.arbiter.kick("ses_target")
    h.opencode.succeed_all()
    turns.observe("ses_target", "busy")
    h.send()
    h.arbiter.tick()
    clock.advance(100)
    assert len(h.opencode.prompts) == 1
    turns.observe("ses_target", "idle")
    assert len(h.opencode.prompts) == 2


def test_turn_mode_batches_what_came_during_the_turn(repo: SwarmRepository, clock: Clock) -> None:
    """Messages sent while a turn runs go out together, in order, once it ends."""
    h = turn_harness(repo, clock)
    turns = h.turns
    assert turns is not None
    h.send()
    h.arbiter.kick("ses_target")
    h.opencode.succeed_all()
    turns.observe("ses_target", "busy")
    later = [h.send(priority=p) for p in ("low", "urgent", "normal")]
    h.arbiter.kick("ses_target")  # as every accepted send does
    turns.observe("ses_target", "idle")
    assert h.opencode.pending()[0].msg_ids() == [later[1], later[2], later[0]]


def test_queue_read_again_only_when_something_may_be_due(
    repo: SwarmRepository, clock: Clock
) -> None:
    """After a hand-off the drain reads the queue again only if the target was kicked
    meanwhile or a bound cut the batch; a row stored without a kick (another process)
    goes with the next tick."""
    h = turn_harness(repo, clock, batch_max=2)
    turns = h.turns
    assert turns is not None
    h.send(msg_id="msg_1")
    h.arbiter.kick("ses_target")
    h.send(msg_id="msg_2")  # no kick
    h.opencode.succeed_all()
    turns.observe("ses_target", "busy")
    turns.observe("ses_target", "idle")
    assert [p.msg_ids() for p in h.opencode.prompts] == [["msg_1"]]
    h.arbiter.tick()
    assert [p.msg_ids() for p in h.opencode.prompts] == [["msg_1"], ["msg_2"]]
    for i in (3, 4, 5):  # a full batch: the rest is read at once, kicked or not
        h.send(msg_id=f"msg_{i}")
    h.opencode.succeed_all()
    turns.observe("ses_target", "busy")
    turns.observe("ses_target", "idle")
    h.arbiter.tick()
    h.opencode.succeed_all()
    turns.observe("ses_target", "busy")
    turns.observe("ses_target", "idle")
    assert [p.msg_ids() for p in h.opencode.prompts][2:] == [["msg_3", "msg_4"], ["msg_5"]]


def test_turn_mode_waits_for_a_persons_turn(repo: SwarmRepository, clock: Clock) -> None:
    """A session busy with a turn someone else started gets nothing until it is idle."""
    h = turn_harness(repo, clock)
    turns = h.turns
    assert turns is not None
    turns.observe("ses_target", "busy")
    h.send()
    h.arbiter.kick("ses_target")
    clock.advance(60)
    assert h.opencode.prompts == []
    turns.observe("ses_target", "idle")
    assert len(h.opencode.prompts) == 1


def test_turn_mode_no_turn_started_moves_on(repo: SwarmRepository, clock: Clock) -> None:
    """A hand-off that starts no turn holds the target only for the busy window."""
    h = turn_harness(repo, clock, batch_max=1)
    h.send()
    h.send()
    h.arbiter.kick("ses_target")
    h.opencode.succeed_all()
    clock.advance(4.9)
    assert len(h.opencode.prompts) == 1
    clock.advance(0.1)
    assert len(h.opencode.prompts) == 2


def test_stop_cuts_turn_waits_short(repo: SwarmRepository, clock: Clock) -> None:
    """stop() does not wait for a running turn: the prompt is already handed off."""
    h = turn_harness(repo, clock)
    turns = h.turns
    assert turns is not None
    h.send()
    h.arbiter.kick("ses_target")
    h.opencode.succeed_all()
    turns.observe("ses_target", "busy")
    stopped: list[None] = []
    h.arbiter.stop().addCallback(stopped.append)
    assert stopped == [None] and h.arbiter.in_flight_targets() == []


def test_ticking_reports_a_live_loop_only(h: Harness) -> None:
    """The watchdog's view: ticking while the loop runs and ticked lately, not after stop."""
    assert not h.arbiter.ticking(1.0)
    h.arbiter.start()
    assert h.arbiter.ticking(1.0)
    h.clock.advance(TICK_S)
    assert h.arbiter.ticking(TICK_S)
    h.arbiter.stop()
    assert not h.arbiter.ticking(60)


def test_stuck_tick_is_not_ticking(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """When ticks stop coming (a wedged loop), ticking turns false once the gap is too long."""
    h.arbiter.start()
    monkeypatch.setattr(h.arbiter, "last_tick_at", h.clock.seconds() - 10)
    assert not h.arbiter.ticking(5)


# -- database faults: a hand-off that cannot be recorded, a late answer, a vanished file ------


def rebuilt(
    h: Harness,
    *,
    batch_max: int = 1,
    batch_max_bytes: int = 1024 * 1024,
    modes: ModeSource | None = None,
    database_problem: Callable[[], str | None] = lambda: None,
) -> Harness:
    """The harness with an arbiter built for these settings, over the same fakes."""
    policy = DeliveryPolicy(tick_s=TICK_S, batch_max=batch_max, batch_max_bytes=batch_max_bytes)
    arbiter = Arbiter(
        InlineDatabase(h.repo), h.registry, h.opencode, h.clock, policy=policy,
        check_directory=lambda d: None,
        modes=modes, database_problem=database_problem,
    )  # fmt: skip
    return replace(h, arbiter=arbiter)


def failing_n_times(method: Any, n: int) -> Any:
    """``method``, except that its first ``n`` calls raise StorageUnavailable (a full disk)."""
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] <= n:
            raise StorageUnavailable("database write failed: database or disk is full")
        return method(*args, **kwargs)

    return wrapper


def test_unrecorded_hand_off_is_not_sent_again(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt opencode took but the database could not record is never prompted again;
    it is recorded, as of when it happened, once the database works again."""
    monkeypatch.setattr(
        SwarmRepository,
        "_hand_off",  # every hand-off record: the drain's step and the retry
        failing_n_times(SwarmRepository._hand_off, 20),
    )
    msg_id = h.send()
    h.arbiter.start()
    handed_at = h.now_ms()
    h.opencode.succeed_all()
    for _ in range(30):
        h.clock.advance(TICK_S)
    assert len(h.prompts_to("ses_target")) == 1
    stored = h.repo.get(msg_id)
    assert stored is not None
    assert (stored.state, stored.handed_off_at) == ("handed_off", handed_at)
    assert h.arbiter.unrecorded() == []


def test_target_is_held_while_its_hand_off_is_unrecorded(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a hand-off waits to be recorded its target gets nothing new; other targets do."""
    monkeypatch.setattr(
        SwarmRepository,
        "_hand_off",  # every hand-off record: the drain's step and the retry
        failing_n_times(SwarmRepository._hand_off, 1),
    )
    first = h.send(msg_id="msg_1")
    h.arbiter.kick("ses_target")
    h.opencode.succeed_all()
    second = h.send(msg_id="msg_2")
    h.send("ses_other")
    h.arbiter.kick("ses_target")
    assert [p.msg_ids() for p in h.opencode.prompts] == [[first], [second]]
    assert h.state(first) == "handed_off"


def test_hold_lasts_as_long_as_the_database_fails(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every tick tries to record the hand-off; the next message waits until one succeeds."""
    monkeypatch.setattr(
        SwarmRepository,
        "_hand_off",  # every hand-off record: the drain's step and the retry
        failing_n_times(SwarmRepository._hand_off, 6),
    )
    h.send(msg_id="msg_1")
    h.send(msg_id="msg_2")
    h.send("ses_other", msg_id="msg_3")
    h.arbiter.start()
    h.opencode.succeed_all()  # msg_1's record fails (1); msg_3's too (2)
    h.clock.advance(TICK_S)  # the tick retries both (3, 4), the kick msg_1's (5)
    assert [p.msg_ids() for p in h.opencode.pending()] == []
    assert [u.msg_ids for u in h.arbiter.unrecorded()] == [("msg_3",), ("msg_1",)]
    h.clock.advance(TICK_S)  # msg_3's retry fails (6); msg_1's lands, then msg_2 goes out
    assert [p.msg_ids() for p in h.opencode.pending()] == [["msg_2"]]


def test_failure_that_cannot_be_recorded_holds_the_target(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed hand-off the database cannot record is retried after its backoff, not
    at the next tick."""
    monkeypatch.setattr(
        SwarmRepository,
        "record_failed_attempt",
        failing_n_times(SwarmRepository.record_failed_attempt, 1),
    )
    h.send()
    h.arbiter.start()
    h.opencode.fail_all(OpencodeError("HTTP 500"))
    h.clock.advance(TICK_S)
    assert len(h.prompts_to("ses_target")) == 1
    h.clock.advance(1.0 - TICK_S)
    assert len(h.prompts_to("ses_target")) == 2


def test_prompt_is_bounded_in_bytes(repo: SwarmRepository, clock: Clock) -> None:
    """A prompt's envelopes together stay within batch_max_bytes; the rest waits its turn."""
    h = rebuilt(make_harness(repo, clock), batch_max=10, batch_max_bytes=2_500)
    for _ in range(5):
        h.send(payload="x" * 1000)
    h.arbiter.kick("ses_target")
    sizes = []
    while pending := h.opencode.pending():
        assert sum(len(t.encode()) for t in pending[0].texts) <= 2_500
        sizes.append(len(pending[0].texts))
        h.opencode.succeed_all()
    assert sizes == [2, 2, 1]


def test_bytes_are_those_of_the_escaped_envelope(repo: SwarmRepository, clock: Clock) -> None:
    """Escaping counts: two 1,000-byte payloads of ``&`` (5,000 bytes escaped each) go
    one per prompt under a 6,000-byte bound."""
    h = rebuilt(make_harness(repo, clock), batch_max=10, batch_max_bytes=6_000)
    h.send(payload="&" * 1000)
    h.send(payload="&" * 1000)
    h.arbiter.kick("ses_target")
    assert [len(p.texts) for p in h.opencode.pending()] == [1]


def test_message_larger_than_the_bound_goes_alone(repo: SwarmRepository, clock: Clock) -> None:
    """A single message larger than batch_max_bytes is still handed off, alone."""
    h = rebuilt(make_harness(repo, clock), batch_max=10, batch_max_bytes=1_024)
    big = h.send(payload="y" * 5_000)
    small = h.send(payload="z")
    h.arbiter.kick("ses_target")
    h.opencode.succeed_all()
    assert [p.msg_ids() for p in h.opencode.prompts] == [[big], [small]]


@pytest.mark.parametrize("answer", ["succeed", "fail"])
def test_hand_off_ending_after_close_writes_nothing(
    h: Harness, db_path: Path, log_events: list[tuple[LogLevel, str]], answer: str
) -> None:
    """A hand-off answered after close() (shutdown past stop_timeout_s) touches no database
    and logs nothing critical; the message stays queued for the next start."""
    msg_id = h.send()
    h.arbiter.start()
    h.arbiter.stop()
    result_of(Deferred.fromCoroutine(h.arbiter.close()))
    h.repo.close()
    if answer == "succeed":
        h.opencode.succeed_all()
    else:
        h.opencode.fail_all(OpencodeError("connection lost", kind=FailureKind.OUTAGE))
    assert [level for level, _ in log_events if level >= LogLevel.error] == []
    again = reopened(h.repo, db_path)
    stored = again.get(msg_id)
    again.close()
    assert stored is not None and stored.state == "queued"


def test_close_records_what_it_can_and_warns_of_the_rest(
    h: Harness, monkeypatch: pytest.MonkeyPatch, log_events: list[tuple[LogLevel, str]]
) -> None:
    """close() makes a last attempt to record an unrecorded hand-off; one that still fails
    is named in a warning (it goes again after the restart)."""
    monkeypatch.setattr(
        SwarmRepository,
        "_hand_off",  # every hand-off record: the drain's step and the retry
        failing_n_times(SwarmRepository._hand_off, 99),
    )
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    h.opencode.succeed_all()
    h.arbiter.stop()
    result_of(Deferred.fromCoroutine(h.arbiter.close()))
    assert any(level == LogLevel.warn and msg_id in text for level, text in log_events)
    assert h.state(msg_id) == "queued"


def test_vanished_database_stops_delivery(h: Harness) -> None:
    """Once the database file is reported gone, neither ticks nor kicks hand anything off."""
    problem: list[str | None] = [None]
    h = rebuilt(h, database_problem=lambda: problem[0])
    h.arbiter.start()
    problem[0] = "database file /x/p.db was deleted (or moved away) while pigeond ran"
    h.send()
    h.arbiter.kick("ses_target")
    h.clock.advance(5)
    assert h.opencode.prompts == []


def test_database_vanishing_during_a_drain_sends_nothing(h: Harness) -> None:
    """A drain that finds the file gone after its lookups does not prompt."""
    problem: list[str | None] = [None]
    modes = SlowModes()
    h = rebuilt(h, modes=modes, database_problem=lambda: problem[0])
    h.send()
    h.arbiter.kick("ses_target")
    problem[0] = "database file /x/p.db was replaced by another file while pigeond ran"
    modes.waiting.pop().callback(DEFAULT_MODE)
    assert h.opencode.prompts == []


# -- the database answers later ------------------------------------------------------


class HeldDatabase(InlineDatabase):
    """Answers each call only when the test releases it, as a lock another process holds
    would make the writer thread wait."""

    def __init__(self, repo: SwarmRepository) -> None:
        super().__init__(repo)
        self.held: list[tuple[Deferred[Any], Callable[[], Any]]] = []

    def read(self, call: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        return self._hold(lambda: call(self.repo, *args, **kwargs))

    def write(self, call: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        return self._hold(lambda: call(self.repo, *args, **kwargs))

    def _hold(self, run: Callable[[], Any]) -> Deferred[Any]:
        answer: Deferred[Any] = Deferred()
        self.held.append((answer, run))
        return answer

    def release_all(self) -> None:
        while self.held:
            answer, run = self.held.pop(0)
            answer.callback(run())


def test_ticks_do_not_pile_up_behind_a_slow_database(h: Harness) -> None:
    """While a tick's database call is unanswered, later ticks ask nothing more; once it is
    answered, ticking goes on."""
    held = HeldDatabase(h.repo)
    arbiter = Arbiter(held, h.registry, h.opencode, h.clock, check_directory=lambda d: None)
    arbiter.start()
    asked = len(held.held)
    h.clock.advance(TICK_S * 10)
    assert len(held.held) == asked == 1  # the first tick's first step, still waiting
    held.release_all()
    h.clock.advance(TICK_S)
    assert len(held.held) == 1  # the next tick asks again


def test_a_queue_that_cannot_be_read_spends_no_attempt(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drain whose queue read fails (storage) stops without a failed attempt; the next
    kick delivers."""
    msg_id = h.send()
    monkeypatch.setattr(
        SwarmRepository, "ready_batch", failing_n_times(SwarmRepository.ready_batch, 1)
    )
    h.arbiter.kick("ses_target")
    assert h.opencode.prompts == [] and h.arbiter.in_flight_targets() == []
    stored = h.repo.get(msg_id)
    assert stored is not None and (stored.state, stored.attempts) == ("queued", 0)
    h.arbiter.kick("ses_target")
    assert [p.msg_ids() for p in h.opencode.prompts] == [[msg_id]]


@pytest.mark.parametrize(
    ("error", "failure_class"),
    [
        (OpencodeError("refused", kind=FailureKind.OUTAGE), "outage"),
        (OpencodeError("HTTP 400", kind=FailureKind.PERMANENT), "permanent"),
        (OpencodeError("HTTP 500", kind=FailureKind.ATTEMPT), "attempt"),
    ],
)
def test_failures_are_counted_by_class(
    h: Harness, error: OpencodeError, failure_class: str
) -> None:
    """Each failed hand-off counts once, under its failure class, for /metrics."""
    h.send()
    h.arbiter.kick("ses_target")
    h.opencode.fail_all(error)
    registry = h.arbiter.metrics.registry
    counted = registry.get_sample_value("pigeond_hand_off_failures_total", {"class": failure_class})
    assert counted == 1
    assert registry.get_sample_value("pigeond_hand_offs_total") == 0


def test_a_new_tick_interval_applies_to_the_running_tick(h: Harness) -> None:
    """A reload's tick_ms restarts the running tick at the new interval."""
    h.arbiter.start()
    h.arbiter.configure(Config(tick_ms=2000))
    started = h.clock.seconds()
    seen = []
    for _ in range(4):
        h.clock.advance(1)
        seen.append(h.arbiter.last_tick_at)
    assert [None if t is None else t - started for t in seen] == [0.0, 2.0, 2.0, 4.0]
    assert h.arbiter.running
