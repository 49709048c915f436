"""Exactly once across a crash: the intent to hand off, committed before the call, and
what a restart does with a message left in doubt (pigeond/delivery/recovery.py).

A "crash" here is a new arbiter over the same database, clock and in-memory opencode
(:func:`~tests.arbiter_harness.restarted`), the old one dropped with its prompt unanswered.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.delivery.arbiter import Arbiter
from pigeond.delivery.grouping import drain_steps
from pigeond.delivery.opencode_client import DeadlineExceeded, FailureKind, OpencodeError
from pigeond.delivery.recovery import SETTLE_S
from pigeond.delivery.turns import TurnTracker
from pigeond.model import StoredMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from pigeond.storage.intents import FOUND_AFTER_RESTART_NOTE
from pigeond.storage.migrations import MIGRATIONS
from pigeond.storage.operator import ActionOutcome
from pigeond.storage.schema import connect, migrate, open_database
from testkit.messages import new_message
from tests.arbiter_harness import OUTAGE_S, Harness, make_harness, restarted

pytestmark = pytest.mark.both_backends

DOWN = OpencodeError("GET /session/ses_target/message: connection refused", kind=FailureKind.OUTAGE)


class NoTurnRunning:
    """``GET /session/status``: no session busy."""

    async def busy_sessions(self, directory: str) -> dict[str, str]:
        return {}


@pytest.fixture
def h(repo: SwarmRepository, clock: Clock) -> Harness:
    return make_harness(repo, clock, transcripts=True)


def row_of(repo: SwarmRepository, msg_id: str) -> StoredMessage:
    stored = repo.get(msg_id)
    assert stored is not None
    return stored


def row(h: Harness, msg_id: str) -> StoredMessage:
    return row_of(h.repo, msg_id)


def crash_during_hand_off(h: Harness, *msg_ids: str, taken: bool) -> int:
    """Send ``msg_ids`` to ses_target, let the arbiter prompt them, and crash before the
    answer; ``taken``: opencode wrote the prompt into the transcript.  Returns the
    intent's time."""
    for msg_id in msg_ids:
        h.send(msg_id=msg_id)
    h.arbiter.kick("ses_target")
    [prompt] = h.opencode.pending()
    if taken:
        h.opencode.take(prompt)
    return h.now_ms()


def test_the_intent_is_committed_before_the_prompt(h: Harness) -> None:
    """While the prompt is with opencode the message is queued with handoff_intent_at set."""
    sent_at = h.now_ms()
    h.send(msg_id="msg_1")
    h.arbiter.kick("ses_target")
    assert len(h.opencode.pending()) == 1
    assert (row(h, "msg_1").state, row(h, "msg_1").handoff_intent_at) == ("queued", sent_at)


def test_a_recorded_hand_off_clears_the_intent(h: Harness) -> None:
    """A 2xx recorded: handed off, no intent left."""
    h.send(msg_id="msg_1")
    h.arbiter.kick("ses_target")
    h.opencode.succeed_all()
    assert (row(h, "msg_1").state, row(h, "msg_1").handoff_intent_at) == ("handed_off", None)


def test_a_failed_attempt_clears_the_intent(h: Harness) -> None:
    """An error answer (the prompt was refused): an attempt spent, no intent left."""
    h.send(msg_id="msg_1")
    h.arbiter.kick("ses_target")
    h.opencode.fail_all(OpencodeError("HTTP 500"))
    assert (row(h, "msg_1").attempts, row(h, "msg_1").handoff_intent_at) == (1, None)


def test_an_outage_clears_the_intent(h: Harness) -> None:
    """opencode unreachable (the prompt never reached it): held, no intent left."""
    h.send(msg_id="msg_1")
    h.arbiter.kick("ses_target")
    h.opencode.fail_all(OpencodeError("connection refused", kind=FailureKind.OUTAGE))
    assert (row(h, "msg_1").attempts, row(h, "msg_1").handoff_intent_at) == (0, None)


def test_a_permanent_failure_clears_the_intent(h: Harness) -> None:
    """A 400 (the prompt was refused for good): failed, no intent left."""
    h.send(msg_id="msg_1")
    h.arbiter.kick("ses_target")
    h.opencode.fail_all(OpencodeError("HTTP 400", 400, FailureKind.PERMANENT))
    assert (row(h, "msg_1").state, row(h, "msg_1").handoff_intent_at) == ("failed", None)


def test_no_answer_in_time_keeps_the_intent(h: Harness) -> None:
    """A prompt with no answer within the deadline may have been taken: the intent stays."""
    intent_at = h.now_ms()
    h.send(msg_id="msg_1")
    h.arbiter.kick("ses_target")
    h.opencode.fail_all(DeadlineExceeded("POST prompt_async: no complete answer within 30 s"))
    assert (row(h, "msg_1").attempts, row(h, "msg_1").handoff_intent_at) == (1, intent_at)


def test_a_retry_after_no_answer_finds_the_prompt_and_sends_nothing(h: Harness) -> None:
    """The retry after a deadline looks first: found in the transcript, not prompted again."""
    h.send(msg_id="msg_1")
    h.arbiter.start()
    [prompt] = h.opencode.pending()
    h.opencode.take(prompt)
    h.opencode.fail_all(DeadlineExceeded("POST prompt_async: no complete answer within 30 s"))
    h.clock.advance(1.0)  # the first backoff
    assert len(h.prompts_to("ses_target")) == 1
    assert row(h, "msg_1").state == "handed_off"


def test_a_restart_finds_a_taken_prompt_and_sends_nothing(h: Harness) -> None:
    """Crash after opencode took the prompt: the restart finds it and prompts nothing."""
    crash_during_hand_off(h, "msg_1", taken=True)
    after = restarted(h)
    after.arbiter.kick("ses_target")
    assert len(h.prompts_to("ses_target")) == 1


def test_a_found_message_is_handed_off_and_verified(h: Harness) -> None:
    """What the transcript shows is recorded: handed off as of the intent, verified now."""
    intent_at = crash_during_hand_off(h, "msg_1", taken=True)
    h.clock.advance(5)
    restarted(h).arbiter.kick("ses_target")
    found = row(h, "msg_1")
    assert (found.state, found.handed_off_at, found.verified_at) == (
        "handed_off", intent_at, h.now_ms(),
    )  # fmt: skip
    assert (found.handoff_intent_at, found.verify_by, found.attempts) == (None, None, 0)
    assert found.handoff_note == FOUND_AFTER_RESTART_NOTE and found.handoff_seq is not None


def test_a_restart_sends_again_a_prompt_that_never_arrived(h: Harness) -> None:
    """Crash before opencode took it: once the settle time has passed, it goes once more."""
    crash_during_hand_off(h, "msg_1", taken=False)
    h.clock.advance(SETTLE_S)
    restarted(h).arbiter.kick("ses_target")
    assert [p.msg_ids() for p in h.opencode.pending()] == [["msg_1"], ["msg_1"]]
    assert row(h, "msg_1").attempts == 0


def test_a_check_right_after_the_intent_waits_out_the_settle_time(h: Harness) -> None:
    """Not found at once is not proof yet: held until SETTLE_S after the intent, then sent."""
    intent_at = crash_during_hand_off(h, "msg_1", taken=False)
    after = restarted(h)
    after.arbiter.start()
    assert len(h.prompts_to("ses_target")) == 1
    held = row(h, "msg_1")
    assert (held.next_retry_at, held.handoff_intent_at) == (intent_at + SETTLE_S * 1000, intent_at)
    h.clock.advance(SETTLE_S)
    assert len(h.prompts_to("ses_target")) == 2


def test_a_prompt_that_lands_during_the_settle_time_is_not_sent_again(h: Harness) -> None:
    """A prompt opencode writes into the transcript after the first look is found at the next."""
    crash_during_hand_off(h, "msg_1", taken=False)
    restarted(h).arbiter.start()
    [old] = h.opencode.pending()
    h.opencode.take(old)
    h.clock.advance(SETTLE_S)
    assert len(h.prompts_to("ses_target")) == 1
    assert row(h, "msg_1").state == "handed_off"


def test_a_whole_batch_in_doubt_is_found_in_one_look(repo: SwarmRepository, clock: Clock) -> None:
    """Three messages in one prompt: all three found, one transcript read, no prompt."""
    h = make_harness(repo, clock, batch_max=3, transcripts=True)
    crash_during_hand_off(h, "msg_1", "msg_2", "msg_3", taken=True)
    restarted(h, batch_max=3).arbiter.kick("ses_target")
    assert [row(h, m).state for m in ("msg_1", "msg_2", "msg_3")] == ["handed_off"] * 3
    assert len(h.opencode.transcript_reads) == 1 and len(h.prompts_to("ses_target")) == 1


def test_messages_behind_a_found_batch_go_out_in_the_next_prompt(
    repo: SwarmRepository, clock: Clock
) -> None:
    """A message queued behind the batch in doubt is handed off once the doubt is over."""
    h = make_harness(repo, clock, batch_max=2, transcripts=True)
    crash_during_hand_off(h, "msg_1", "msg_2", taken=True)
    h.send(msg_id="msg_3")
    restarted(h, batch_max=2).arbiter.kick("ses_target")
    assert [p.msg_ids() for p in h.opencode.pending()] == [["msg_1", "msg_2"], ["msg_3"]]


def test_a_found_message_in_turn_delivery_is_not_sent_again(
    repo: SwarmRepository, clock: Clock
) -> None:
    """In ``turn`` delivery the same: the restart finds it and the next message still goes."""
    h = make_harness(repo, clock, transcripts=True)
    crash_during_hand_off(h, "msg_1", taken=True)
    h.send(msg_id="msg_2")
    turns = TurnTracker(clock, NoTurnRunning(), Config(busy_window_s=5, turn_timeout_s=600))
    after = restarted(h, turns=turns)
    after.arbiter.kick("ses_target")
    assert [p.msg_ids() for p in h.opencode.prompts] == [["msg_1"], ["msg_2"]]
    assert row(h, "msg_1").state == "handed_off"


def test_an_unreadable_transcript_holds_without_spending_attempts(h: Harness) -> None:
    """opencode down at the restart: nothing sent, no attempt, still in doubt, held."""
    intent_at = crash_during_hand_off(h, "msg_1", taken=False)
    h.clock.advance(SETTLE_S)
    h.opencode.transcript_error = DOWN
    restarted(h).arbiter.kick("ses_target")
    held = row(h, "msg_1")
    assert len(h.prompts_to("ses_target")) == 1
    assert (held.attempts, held.handoff_intent_at) == (0, intent_at)
    assert held.next_retry_at == h.now_ms() + OUTAGE_S * 1000
    assert held.last_error is not None and "cannot be read" in held.last_error


def test_an_unreadable_transcript_during_an_outage_waits_for_opencode(h: Harness) -> None:
    """opencode unreachable (reachability's view) at the restart: the doubt is due again at
    once, not held for outage_retry_s, and ended as soon as opencode answers."""
    crash_during_hand_off(h, "msg_1", taken=True)
    h.clock.advance(SETTLE_S)
    h.opencode.transcript_error = DOWN

    def down() -> bool:  # as reachability sees it: from the first failed read on
        return bool(h.opencode.transcript_reads) and h.opencode.transcript_error is not None

    after = restarted(h, opencode_down=down)
    after.arbiter.kick("ses_target")
    held = row(h, "msg_1")
    assert (held.attempts, held.next_retry_at) == (0, h.now_ms())
    h.opencode.transcript_error = None
    after.arbiter.start()
    after.arbiter.opencode_back()
    assert row(h, "msg_1").state == "handed_off" and len(h.prompts_to("ses_target")) == 1


def test_a_held_doubt_is_ended_once_the_transcript_can_be_read(h: Harness) -> None:
    """After the outage hold the transcript is read again; found, nothing is sent."""
    crash_during_hand_off(h, "msg_1", taken=True)
    h.opencode.transcript_error = DOWN
    after = restarted(h)
    after.arbiter.start()
    h.opencode.transcript_error = None
    h.clock.advance(OUTAGE_S)
    assert len(h.prompts_to("ses_target")) == 1
    assert row(h, "msg_1").state == "handed_off"


def test_retry_now_on_a_held_message_in_doubt_looks_again_at_once(h: Harness) -> None:
    """An operator's retry-now ends the outage hold: the transcript is read at once."""
    crash_during_hand_off(h, "msg_1", taken=True)
    h.opencode.transcript_error = DOWN
    after = restarted(h)
    after.arbiter.kick("ses_target")
    h.opencode.transcript_error = None
    assert h.repo.retry_now("msg_1", h.now_ms()) is ActionOutcome.CHANGED
    after.arbiter.kick("ses_target")
    assert row(h, "msg_1").state == "handed_off" and len(h.prompts_to("ses_target")) == 1


def test_a_message_in_doubt_to_a_vanished_session_fails(h: Harness) -> None:
    """A session opencode no longer has holds nothing: the message fails as any would."""
    crash_during_hand_off(h, "msg_1", taken=False)
    h.clock.advance(SETTLE_S)
    after = restarted(h)
    after.registry.gone.add("ses_target")
    after.arbiter.kick("ses_target")
    assert (row(h, "msg_1").state, row(h, "msg_1").handoff_intent_at) == ("failed", None)


def test_a_message_in_doubt_is_not_expired(h: Harness) -> None:
    """Past its expiry while in doubt, it stays queued: it may have arrived."""
    h.send(msg_id="msg_1", expires_at=h.now_ms() + 1000)
    h.arbiter.kick("ses_target")
    h.clock.advance(2)
    assert h.repo.expire_due(h.now_ms()) == []
    assert row(h, "msg_1").state == "queued"


def test_an_expired_message_found_in_the_transcript_is_handed_off(h: Harness) -> None:
    """Past its expiry and found: handed off, no failure notice to its sender."""
    h.send(msg_id="msg_1", expires_at=h.now_ms() + 1000)
    h.arbiter.kick("ses_target")
    [prompt] = h.opencode.pending()
    h.opencode.take(prompt)
    h.clock.advance(SETTLE_S)
    restarted(h).arbiter.kick("ses_target")
    assert row(h, "msg_1").state == "handed_off"
    assert h.repo.count_by_state() == {"handed_off": 1}


def test_an_expired_message_not_found_is_expired_not_sent(h: Harness) -> None:
    """Past its expiry and not found: not sent again; the sweep expires it."""
    h.send(msg_id="msg_1", expires_at=h.now_ms() + 1000)
    h.arbiter.kick("ses_target")
    h.clock.advance(SETTLE_S)
    restarted(h).arbiter.kick("ses_target")
    assert len(h.prompts_to("ses_target")) == 1
    assert h.repo.expire_due(h.now_ms()) == ["msg_1"]


def test_an_operator_can_cancel_a_message_in_doubt(h: Harness) -> None:
    """Cancelled while in doubt: never sent again, and the row still says it was in doubt."""
    intent_at = crash_during_hand_off(h, "msg_1", taken=False)
    assert h.repo.cancel("msg_1", h.now_ms()) is ActionOutcome.CHANGED
    h.clock.advance(SETTLE_S)
    restarted(h).arbiter.kick("ses_target")
    assert len(h.prompts_to("ses_target")) == 1
    assert (row(h, "msg_1").state, row(h, "msg_1").handoff_intent_at) == ("cancelled", intent_at)


class HeldIntents(InlineDatabase):
    """Drain steps (a batch's read and intent, a record) wait until the test releases them
    (a busy writer thread); each write is one trip: ``trips`` holds how many targets' steps
    each carried."""

    def __init__(self, repo: SwarmRepository) -> None:
        super().__init__(repo)
        self.trips: list[tuple[int, Deferred[Any], Callable[[], Any]]] = []

    def write(self, call: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        if call is not drain_steps:
            return super().write(call, *args, **kwargs)
        answer: Deferred[Any] = Deferred()
        self.trips.append((len(args[0]), answer, lambda: call(self.repo, *args, **kwargs)))
        return answer

    def release_next(self) -> None:
        _, answer, run = next(t for t in self.trips if not t[1].called)
        answer.callback(run())


def test_intents_that_come_during_a_write_go_together_in_the_next(h: Harness) -> None:
    """Three targets at once: the first intent goes alone, the two that came meanwhile share
    the next trip, and each target's prompt goes once its intent is written."""
    held = HeldIntents(h.repo)
    arbiter = Arbiter(held, h.registry, h.opencode, h.clock, check_directory=lambda d: None)
    for target in ("ses_a", "ses_b", "ses_c"):
        h.send(target)
        arbiter.kick(target)
    assert [n for n, _, _ in held.trips] == [1] and h.opencode.prompts == []
    held.release_next()
    assert [n for n, _, _ in held.trips] == [1, 2]
    held.release_next()
    assert sorted(p.target for p in h.opencode.pending()) == ["ses_a", "ses_b", "ses_c"]


def test_a_message_cancelled_before_its_intent_is_not_sent(repo: SwarmRepository) -> None:
    """The intent is written only for messages still queued, and says which they are."""
    for msg_id in ("msg_1", "msg_2"):
        repo.accept(new_message("ses_target", msg_id=msg_id), 1000)
    repo.cancel("msg_1", 1500)
    assert repo.mark_handoff_intents([(["msg_1", "msg_2"], 2000)]) == [["msg_2"]]


@pytest.mark.sqlite_only("SQLite's statement trace")
def test_intents_of_several_prompts_share_one_transaction(repo: SwarmRepository) -> None:
    """Under load many targets' intents are one commit; each gets its own answer."""
    for msg_id, to in (("msg_1", "ses_a"), ("msg_2", "ses_b"), ("msg_3", "ses_b")):
        repo.accept(new_message(to, msg_id=msg_id), 1000)
    statements: list[str] = []
    repo.sqlite_connection.set_trace_callback(statements.append)
    assert repo.mark_handoff_intents([(["msg_1"], 2000), (["msg_2", "msg_3"], 2001)]) == [
        ["msg_1"], ["msg_2", "msg_3"],
    ]  # fmt: skip
    repo.sqlite_connection.set_trace_callback(None)
    assert statements.count("COMMIT") == 1
    assert [row_of(repo, m).handoff_intent_at for m in ("msg_1", "msg_3")] == [2000, 2001]


def test_a_message_in_doubt_is_never_pruned(repo: SwarmRepository) -> None:
    """In doubt means queued: pruning leaves it whatever its age."""
    repo.accept(new_message("ses_target", msg_id="msg_1"), 1000)
    repo.mark_handoff_intents([(["msg_1"], 2000)])
    assert repo.prune_batch(10**15, 100) == {}
    assert repo.get("msg_1") is not None


def test_migration_8_adds_the_intent_column_empty(tmp_path: Path) -> None:
    """A version-7 database's queued messages come through migration 8 with no intent."""
    path = tmp_path / "v7.db"
    conn = connect(path)
    migrate(conn, MIGRATIONS[:7])
    conn.execute(
        "INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, payload,"
        " created_at, updated_at, next_retry_at, accept_seq)"
        " VALUES ('msg_old', 'ses_s', 'ses_target', 'chat', 'hi', 1000, 1000, 1000, 1)"
    )
    conn.close()
    upgraded = SwarmRepository(open_database(path))
    try:
        assert row_of(upgraded, "msg_old").handoff_intent_at is None
        assert [m.msg_id for m in upgraded.ready_batch("ses_target", 2000, 10)] == ["msg_old"]
    finally:
        upgraded.close()
