"""The members that ask for their messages: a Claude Code session's turn end and channel,
an MCP-only member's read (pigeond/delivery/member_doors.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.delivery.claude_runtime import AT_TURN_END, ON_CHANNEL, ClaudeRuntime
from pigeond.delivery.failures import FailureKind, HandOffError
from pigeond.delivery.grouping import Grouped, StepAnswer, StepAsk, drain_steps
from pigeond.delivery.member_doors import ANSWER_WITHIN_S
from pigeond.delivery.metrics import DeliveryMetrics
from pigeond.delivery.outcomes import DrainState, HandOffOutcomes
from pigeond.delivery.policy import DeliveryPolicy
from pigeond.delivery.pull_slots import NOTHING, Ask, PullSlots
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from testkit.messages import new_message
from tests.arbiter_harness import FakeRegistry
from tests.http_helpers import result_of
from tests.member_harness import CLAUDE, MCP, Members, make_members


@pytest.fixture
def m(repo: SwarmRepository, clock: Clock, tmp_path: Path) -> Members:
    members = make_members(repo, clock, tmp_path)
    members.event("session_start")
    return members


def test_a_turn_end_with_nothing_due_is_answered_at_once(m: Members) -> None:
    """Nothing waiting: the Stop hook is answered with nothing, without waiting."""
    assert result_of(m.turn_end()) == NOTHING


def test_a_turn_end_takes_the_due_messages_as_one_batch_urgent_first(m: Members) -> None:
    """Three waiting messages go as one batch at the turn end, the urgent one first."""
    first = m.send(CLAUDE, payload="one")
    second = m.send(CLAUDE, payload="two")
    urgent = m.send(CLAUDE, payload="three", priority="urgent")
    answer = result_of(m.turn_end())
    assert answer["msg_ids"] == [urgent, first, second]
    text = answer["text"]
    assert isinstance(text, str) and text.startswith("<swarm_message ")
    assert text.count("<swarm_message ") == 3


def test_a_turn_end_hand_off_is_recorded_with_how_it_went(m: Members) -> None:
    """The batch printed by the hook is recorded as handed off, at the turn end."""
    msg_id = m.send(CLAUDE)
    result_of(m.turn_end())
    stored = m.stored(msg_id)
    assert stored.state == "handed_off"
    assert stored.handoff_note == AT_TURN_END
    assert stored.verified_at is None  # seen only once its transcript shows it


def test_the_next_batch_waits_for_the_next_turn_end(m: Members) -> None:
    """One batch a turn: a message sent after the hand-off waits for the next turn end."""
    m.send(CLAUDE)
    result_of(m.turn_end())
    later = m.send(CLAUDE)
    m.arbiter.kick(CLAUDE)
    assert m.stored(later).state == "queued"
    assert result_of(m.turn_end())["msg_ids"] == [later]


def test_a_drain_that_cannot_answer_in_time_lets_the_session_stop(m: Members) -> None:
    """An ask nothing answers (a drain stuck behind another) is answered with nothing
    within ANSWER_WITHIN_S: a hook never holds a session up."""
    m.send(CLAUDE)
    m.arbiter.stop()  # pigeond stopping: no drain starts
    asked = m.turn_end()
    m.clock.advance(ANSWER_WITHIN_S)
    assert result_of(asked) == NOTHING


def test_an_idle_session_on_its_channel_is_pushed_a_new_message(m: Members) -> None:
    """A session idle after its turn, with its channel waiting, is pushed a message at once."""
    result_of(m.turn_end())  # the turn ended with nothing: idle
    waiting = m.wait(CLAUDE, 25)
    assert not waiting.called
    msg_id = m.send(CLAUDE)
    m.arbiter.kick(CLAUDE)
    assert result_of(waiting)["msg_ids"] == [msg_id]
    assert m.stored(msg_id).handoff_note == ON_CHANNEL


def test_nothing_is_pushed_into_a_person_s_running_turn(m: Members) -> None:
    """After a person's prompt (UserPromptSubmit), the channel waits for the turn's end."""
    m.event("prompt_submit")
    waiting = m.wait(CLAUDE, 25)
    msg_id = m.send(CLAUDE)
    m.arbiter.kick(CLAUDE)
    assert not waiting.called
    assert result_of(m.turn_end())["msg_ids"] == [msg_id]  # at its turn end instead


def test_a_channel_wait_ends_with_nothing_after_its_bound(m: Members) -> None:
    """A channel's wait with nothing due is answered with nothing once wait_s passed."""
    waiting = m.wait(CLAUDE, 25)
    m.clock.advance(25)
    assert result_of(waiting) == NOTHING


def test_a_member_s_read_takes_its_messages_and_they_are_seen(m: Members) -> None:
    """An MCP-only member's read hands its due messages off, seen at once."""
    msg_id = m.send(MCP)
    answer = result_of(m.wait(MCP))
    assert answer["msg_ids"] == [msg_id]
    stored = m.stored(msg_id)
    assert (stored.state, stored.verified_at is not None) == ("handed_off", True)


def test_a_hand_off_to_an_ask_answered_already_is_not_taken(m: Members) -> None:
    """A batch for an ask that timed out meanwhile raises NOT_TAKEN: nothing reached it."""
    slots = PullSlots()
    runtime = ClaudeRuntime(slots, None)
    slot = slots.open(CLAUDE, Ask.TURN_END)
    prepared = result_of(Deferred.fromCoroutine(runtime.prepare(CLAUDE)))
    assert prepared is not None
    slot.give(None)
    with pytest.raises(HandOffError) as raised:
        result_of(Deferred.fromCoroutine(runtime.hand_off(CLAUDE, prepared, ["<x>"])))
    assert raised.value.kind is FailureKind.NOT_TAKEN


def test_a_batch_not_taken_stays_due_with_no_attempt_spent(
    repo: SwarmRepository, clock: Clock
) -> None:
    """A NOT_TAKEN outcome spends no attempt and leaves the messages due now."""
    msg_id = new_message(CLAUDE).msg_id
    repo.accept(new_message(CLAUDE, msg_id=msg_id), int(clock.seconds() * 1000))
    stored = repo.get(msg_id)
    assert stored is not None
    db = InlineDatabase(repo)
    writes: Grouped[StepAsk, StepAnswer] = Grouped(lambda asks: db.write(drain_steps, asks))
    outcomes = HandOffOutcomes(
        db, writes, DrainState(), DeliveryPolicy, FakeRegistry(), DeliveryMetrics(), clock,
        lambda: False,
    )  # fmt: skip
    error = HandOffError("the session stopped asking", kind=FailureKind.NOT_TAKEN)
    result_of(Deferred.fromCoroutine(outcomes.record_failure(CLAUDE, [stored], error)))
    after = repo.get(msg_id)
    assert after is not None
    assert (after.state, after.attempts) == ("queued", 0)
    assert repo.ready_targets(int(clock.seconds() * 1000)) == [CLAUDE]


def test_the_transcript_path_is_kept_for_a_restart(m: Members, repo: SwarmRepository) -> None:
    """A Claude Code session's registration names its transcript, in the database."""
    member = repo.member(CLAUDE)
    assert member is not None
    assert (member.runtime, member.transcript_path) == ("claude", str(m.transcript))
