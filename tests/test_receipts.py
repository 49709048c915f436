"""The receipt chain's end: a seen message becomes answered when the turn that consumed
it ends with the target's reply (pigeond/delivery/answers.py, the verifier's looks on the
injected clock, the turn tracker's count of turn ends, storage/receipts.py)."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.delivery.answers import answers_in
from pigeond.delivery.turns import TurnTracker
from pigeond.delivery.verifier import TURN_END_SETTLE_S
from pigeond.storage import StorageUnavailable, SwarmRepository
from testkit.messages import assistant_entry, new_message, user_entry
from tests.storage_helpers import seen_message
from tests.verifier_rig import GRACE_MS, Rig, verifier_rig

pytestmark = pytest.mark.both_backends

TURN_TIMEOUT_S = 600.0
ABORTED = {"name": "MessageAbortedError", "data": {"message": "Aborted"}}


# -- reading a transcript ------------------------------------------------------------


def test_a_reply_that_ends_the_turn_answers_the_message() -> None:
    """The completed, error-free assistant message whose parent carried the envelope."""
    transcript = [user_entry("u1", "<env a>"), assistant_entry("a1", "u1", "done")]
    assert answers_in(transcript, {"msg_a": "u1"}) == {"msg_a": "a1"}


def test_one_turn_answers_every_message_of_its_batch() -> None:
    """Three envelopes in one prompt (one user message) are answered by its one reply."""
    transcript = [user_entry("u1", "<a>", "<b>", "<c>"), assistant_entry("a1", "u1")]
    homes = {"msg_a": "u1", "msg_b": "u1", "msg_c": "u1"}
    assert answers_in(transcript, homes) == dict.fromkeys(homes, "a1")


@pytest.mark.parametrize(
    ("last_step", "why"),
    [
        (assistant_entry("a2", "u1", None, finish=None, completed=False), "still streaming"),
        (assistant_entry("a2", "u1", "half", finish=None, completed=False), "text, unfinished"),
        (assistant_entry("a2", "u1", None, finish=None, error=ABORTED), "aborted"),
        (assistant_entry("a2", "u1", "so far", finish="stop", error=ABORTED), "text, error"),
        (assistant_entry("a2", "u1", "calling", finish="tool-calls"), "loop goes on"),
        (assistant_entry("a2", "u1", "more", finish="unknown"), "loop goes on (unknown)"),
        (assistant_entry("a2", "u1", None), "ended without a text part"),
        (assistant_entry("a2", "u1", " \n "), "ended with blank text"),
    ],
)
def test_a_turn_that_did_not_end_with_words_does_not_answer(
    last_step: dict[str, Any], why: str
) -> None:
    """Unfinished, failed, still looping or silent: the message is not answered."""
    transcript = [user_entry("u1", "<a>"), assistant_entry("a1", "u1", "x", finish="tool-calls")]
    assert answers_in([*transcript, last_step], {"msg_a": "u1"}) == {}, why


def test_a_turn_of_tool_steps_is_answered_by_its_last_step() -> None:
    """Tool steps share the parent; the step that stops the loop is the answer."""
    transcript = [
        user_entry("u1", "<a>"),
        assistant_entry("a1", "u1", None, finish="tool-calls"),
        assistant_entry("a2", "u1", "I ran it", finish="tool-calls"),
        assistant_entry("a3", "u1", "all green"),
    ]
    assert answers_in(transcript, {"msg_a": "u1"}) == {"msg_a": "a3"}


def test_no_assistant_message_yet_is_not_answered() -> None:
    """A prompt whose turn has not started (or whose model failed) has no answer."""
    assert answers_in([user_entry("u1", "<a>")], {"msg_a": "u1"}) == {}


def test_two_prompts_answered_in_one_model_call_count_for_both() -> None:
    """When the reply's parent is a later user message, it answers the earlier one too."""
    transcript = [user_entry("u1", "<a>"), user_entry("u2", "hi"), assistant_entry("a1", "u2")]
    assert answers_in(transcript, {"msg_a": "u1"}) == {"msg_a": "a1"}


def test_a_later_turn_does_not_answer_a_message_whose_own_turn_failed() -> None:
    """The turn that consumed the message failed; a person's next turn is no answer to it."""
    transcript = [
        user_entry("u1", "<a>"),
        assistant_entry("a1", "u1", None, finish=None, error=ABORTED),
        user_entry("u2", "try again"),
        assistant_entry("a2", "u2", "ok"),
    ]
    assert answers_in(transcript, {"msg_a": "u1"}) == {}


def test_a_reply_is_found_when_the_envelope_is_older_than_the_part_read() -> None:
    """Only the newest messages are read: a known parent id is enough."""
    newest = [assistant_entry("a9", "u1", None, finish="tool-calls"), assistant_entry("a10", "u1")]
    assert answers_in(newest, {"msg_a": "u1"}) == {"msg_a": "a10"}


# -- the verifier's looks, on the injected clock ----------------------------------------


@pytest.fixture
def rig(repo: SwarmRepository, clock: Clock) -> Rig:
    return verifier_rig(repo, clock, TURN_TIMEOUT_S)


def test_seen_then_answered_when_the_turn_ends_with_a_reply(rig: Rig) -> None:
    """First look: seen (the turn runs); a later look after the reply: answered, at that time."""
    rig.prompt("u1", "msg_a")
    rig.reply(assistant_entry("a1", "u1", None, finish=None, completed=False))
    rig.check()
    seen_at = rig.now_ms()
    assert rig.receipt("msg_a") == ("seen", None, None)
    rig.transcripts.entries["ses_target"][-1] = assistant_entry("a1", "u1", "done")
    rig.clock.advance(2)
    rig.check()
    assert rig.receipt("msg_a") == ("answered", seen_at + 2000, "a1")


def test_a_turn_over_before_the_first_look_is_seen_and_answered_at_once(rig: Rig) -> None:
    """Seen and answered by one read when the reply is already there."""
    rig.prompt("u1", "msg_a")
    rig.reply(assistant_entry("a1", "u1", "done"))
    rig.check()
    assert rig.receipt("msg_a") == ("answered", rig.now_ms(), "a1")
    assert len(rig.transcripts.reads) == 1


def test_a_batch_of_three_is_answered_by_the_turn_that_consumed_it(rig: Rig) -> None:
    """Three messages in one prompt: all three answered by its one reply."""
    rig.prompt("u1", "msg_a", "msg_b", "msg_c")
    rig.check()
    rig.reply(assistant_entry("a1", "u1", None, finish="tool-calls"), assistant_entry("a2", "u1"))
    rig.clock.advance(2)
    rig.check()
    assert [rig.receipt(m) for m in ("msg_a", "msg_b", "msg_c")] == [
        ("answered", rig.now_ms(), "a2")
    ] * 3


def test_a_failed_turn_leaves_the_message_seen(rig: Rig) -> None:
    """An aborted reply is no answer: the receipt stays at seen."""
    rig.prompt("u1", "msg_a")
    rig.reply(assistant_entry("a1", "u1", "partial", finish=None, error=ABORTED))
    rig.check()
    assert rig.receipt("msg_a") == ("seen", None, None)


def test_answers_are_looked_for_again_only_after_a_turn_ended(rig: Rig) -> None:
    """With the event stream up, a seen message costs no read until its target's turn ends."""
    rig.turns["ses_target"] = (1, 0)
    rig.prompt("u1", "msg_a")
    rig.verifier.tick()
    assert len(rig.transcripts.reads) == 1
    rig.clock.advance(60)
    rig.verifier.tick()
    assert len(rig.transcripts.reads) == 1
    rig.reply(assistant_entry("a1", "u1"))
    rig.turns["ses_target"] = (1, 1)
    rig.verifier.tick()
    assert len(rig.transcripts.reads) == 2
    assert rig.receipt("msg_a")[0] == "answered"


def a_turn_end_looked_at_before_its_reply(rig: Rig) -> None:
    """msg_a seen, then its turn's end told and looked at while no reply is written yet."""
    rig.turns["ses_target"] = (1, 0)
    rig.prompt("u1", "msg_a")
    rig.verifier.tick()
    rig.clock.advance(60)
    rig.turns["ses_target"] = (1, 1)
    rig.verifier.tick()


def test_a_turn_end_told_before_its_reply_is_written_is_looked_at_again(rig: Rig) -> None:
    """A look right after a turn end finds no reply yet (Claude Code flushes it after its
    Stop hook): the next interval looks again and finds it, with no other turn end."""
    a_turn_end_looked_at_before_its_reply(rig)
    assert rig.receipt("msg_a")[0] == "seen"
    rig.reply(assistant_entry("a1", "u1"))
    rig.clock.advance(2)
    rig.verifier.tick()
    assert rig.receipt("msg_a")[0] == "answered"


def test_after_a_turn_end_settles_answers_wait_for_the_next_turn_end(rig: Rig) -> None:
    """Looks after a turn end stop TURN_END_SETTLE_S after it: no reply, no more reads."""
    a_turn_end_looked_at_before_its_reply(rig)
    reads = len(rig.transcripts.reads)
    for _ in range(int(TURN_END_SETTLE_S / 2) + 5):
        rig.clock.advance(2)
        rig.verifier.tick()
    assert reads < len(rig.transcripts.reads) <= reads + int(TURN_END_SETTLE_S / 2) + 1
    settled = len(rig.transcripts.reads)
    rig.clock.advance(60)
    rig.verifier.tick()
    assert len(rig.transcripts.reads) == settled


def test_with_the_event_stream_down_answers_are_looked_for_every_interval(rig: Rig) -> None:
    """No turn ends can be seen: a seen message's target is read once per interval."""
    rig.prompt("u1", "msg_a")
    rig.verifier.tick()
    for _ in range(3):
        rig.clock.advance(1)
        rig.verifier.tick()
    assert len(rig.transcripts.reads) == 2


def test_looks_for_an_answer_stop_turn_timeout_after_the_message_was_seen(rig: Rig) -> None:
    """A message nobody answers is looked for turn_timeout_s long, then costs nothing."""
    rig.prompt("u1", "msg_a")
    rig.verifier.tick()
    rig.clock.advance(TURN_TIMEOUT_S - 1)
    rig.verifier.tick()
    assert len(rig.transcripts.reads) == 2
    rig.clock.advance(2)
    rig.reply(assistant_entry("a1", "u1"))
    rig.verifier.tick()
    assert len(rig.transcripts.reads) == 2
    assert rig.receipt("msg_a") == ("seen", None, None)


def test_a_long_turn_is_followed_past_the_newest_messages_read(rig: Rig) -> None:
    """A turn of many steps pushes the envelope out of the read; the reply still counts."""
    rig.prompt("u1", "msg_a")
    rig.check()
    steps = [assistant_entry(f"a{n}", "u1", None, finish="tool-calls") for n in range(80)]
    rig.reply(*steps, assistant_entry("a_last", "u1", "finished"))
    rig.clock.advance(2)
    rig.check()
    assert rig.transcripts.reads[1] == ("ses_target", 50)  # then a full one, for its cost
    assert rig.receipt("msg_a") == ("answered", rig.now_ms(), "a_last")


def test_a_reply_that_cannot_be_recorded_is_looked_for_again(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk loses no answer: the next interval looks again, though no turn ended."""

    def full(*args: object) -> list[str]:
        raise StorageUnavailable("database or disk is full")

    rig.turns["ses_target"] = (1, 0)
    rig.prompt("u1", "msg_a")
    rig.check()
    rig.reply(assistant_entry("a1", "u1"))
    monkeypatch.setattr(SwarmRepository, "record_look", full)
    rig.clock.advance(2)
    rig.check()
    monkeypatch.undo()
    rig.clock.advance(2)
    rig.verifier.tick()
    assert rig.receipt("msg_a")[0] == "answered"


# -- the turn tracker's count of turn ends ----------------------------------------------


class NoPolls:
    async def busy_sessions(self, directory: str) -> dict[str, str]:
        raise AssertionError("no poll expected")


def test_a_turn_end_changes_the_count_and_a_repeated_idle_does_not(clock: Clock) -> None:
    """busy → idle is one turn end; a second idle for the same end is not another."""
    tracker = TurnTracker(clock, NoPolls(), Config())
    tracker.stream_state(True)
    before = tracker.turns_ended("ses_a")
    tracker.observe("ses_a", "busy")
    tracker.observe("ses_a", "idle")
    after = tracker.turns_ended("ses_a")
    tracker.observe("ses_a", "idle")
    assert before != after == tracker.turns_ended("ses_a")


def test_turn_ends_cannot_be_counted_while_the_stream_is_down(clock: Clock) -> None:
    """None while the event stream is down; a reconnection is a new count."""
    tracker = TurnTracker(clock, NoPolls(), Config())
    tracker.stream_state(True)
    first = tracker.turns_ended("ses_a")
    tracker.stream_state(False)
    assert tracker.turns_ended("ses_a") is None
    tracker.stream_state(True)
    assert tracker.turns_ended("ses_a") not in (None, first)


# -- storage -------------------------------------------------------------------------


def test_only_a_seen_message_can_be_answered_and_only_once(repo: SwarmRepository) -> None:
    """mark_answered skips queued, unseen and already answered messages."""
    repo.accept(new_message(msg_id="msg_queued"), 1)
    repo.accept(new_message(msg_id="msg_unseen"), 1)
    repo.mark_handed_off("msg_unseen", 1, GRACE_MS)
    seen_message(repo, "msg_seen", 1)
    answers = {"msg_queued": "a1", "msg_unseen": "a1", "msg_seen": "a1"}
    assert repo.mark_answered(answers, 5) == ["msg_seen"]
    assert repo.mark_answered({"msg_seen": "a2"}, 9) == []
    stored = repo.get("msg_seen")
    assert stored is not None and (stored.answered_at, stored.answer_message_id) == (5, "a1")


def test_only_messages_seen_within_the_window_await_an_answer(repo: SwarmRepository) -> None:
    """Seen before ``since_ms``, or answered: no longer awaited."""
    seen_message(repo, "msg_old", 1_000, to="ses_old")
    seen_message(repo, "msg_new", 5_000, to="ses_new")
    seen_message(repo, "msg_done", 5_000, to="ses_done")
    repo.mark_answered({"msg_done": "a1"}, 6_000)
    assert repo.unanswered_targets(2_000) == ["ses_new"]
    assert [m.msg_id for m in repo.awaiting_answer("ses_new", 2_000)] == ["msg_new"]
    assert repo.awaiting_answer("ses_old", 2_000) == []
