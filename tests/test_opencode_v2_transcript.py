"""What a 2.x transcript shows pigeond (pigeond/delivery/opencode_v2_transcript.py)."""

from __future__ import annotations

from typing import Any

from pigeond.delivery.opencode_v2_transcript import OpencodeV2Transcript, begins_a_turn


def user(message_id: str, *msg_ids: str) -> dict[str, Any]:
    envelopes = [f'<swarm_message from="ses_a" msg_id="{m}">hi</swarm_message>' for m in msg_ids]
    return {"id": message_id, "type": "user", "text": "\n\n".join(envelopes) or "typed"}


def assistant(
    message_id: str, finish: str = "stop", text: str = "ok", **extra: Any
) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "assistant",
        "time": {"created": 1, "completed": 2},
        "content": [{"type": "text", "text": text}],
        "finish": finish,
        **extra,
    }


def test_inputs_read_together_are_one_turn_answered_once() -> None:
    """Two inputs before one answer (steers merged) are one turn, both answered by it."""
    view = OpencodeV2Transcript([user("in1", "m1"), user("in2", "m2"), assistant("a1")], True)
    where = {"m1": "in1", "m2": "in2"}
    assert view.answers(where) == {"m1": "a1", "m2": "a1"}
    assert [(t.key, t.msg_ids) for t in view.turns(where)] == [("in1", ("m1", "m2"))]


def test_a_queued_input_is_answered_by_its_own_turn_only() -> None:
    """An input after an answered one waits for a turn of its own."""
    view = OpencodeV2Transcript([user("in1"), assistant("a1"), user("in2", "m2")], True)
    assert view.answers({"m2": "in2"}) == {}
    assert view.turns({"m2": "in2"}) == []


def test_a_turn_calling_tools_goes_on_and_its_last_step_answers() -> None:
    """A step ending in tool calls does not end the turn; the step after it answers."""
    steps = [user("in1", "m1"), assistant("a1", finish="tool-calls")]
    assert OpencodeV2Transcript(steps, True).answers({"m1": "in1"}) == {}
    ended = OpencodeV2Transcript([*steps, assistant("a2")], True)
    assert ended.answers({"m1": "in1"}) == {"m1": "a2"}


def test_a_turn_ending_in_an_error_or_silence_answers_nothing() -> None:
    """An error or a blank text ends the turn without an answer."""
    for last in (assistant("a1", error={"name": "Aborted"}), assistant("a1", text=" ")):
        view = OpencodeV2Transcript([user("in1", "m1"), last], True)
        assert view.answers({"m1": "in1"}) == {}
        assert [t.msg_ids for t in view.turns({"m1": "in1"})] == [("m1",)]


def test_a_read_beginning_inside_a_turn_marks_it_partial() -> None:
    """The first turn of a read that is not the whole transcript may have begun before it."""
    view = OpencodeV2Transcript([user("in1", "m1"), assistant("a1")], False)
    assert [t.partial for t in view.turns({"m1": "in1"})] == [True]


def test_messages_show_a_turns_beginning_after_an_idle_marker_or_an_ended_step_only() -> None:
    """An idle marker or a step that ended its turn, then more, shows where the next turn
    begins; an input first (maybe a steer mid-turn), a step of a turn going on, or an
    ended step alone (its turn's input before it) does not."""
    idle = {"id": "idle1", "type": "idle"}
    assert begins_a_turn([idle, user("in1")]) and begins_a_turn([assistant("a1"), user("in2")])
    assert not begins_a_turn([user("in1"), assistant("a1")])
    assert not begins_a_turn([assistant("a1", finish="tool-calls"), user("in2")])
    assert not begins_a_turn([assistant("a1")])


def test_a_steer_read_mid_turn_is_answered_by_that_turn() -> None:
    """A steer written after a step of tool calls joins the turn going on: that turn's
    answer answers both inputs, and its usage counts every step once."""
    steps = [user("in1", "m1"), assistant("a1", finish="tool-calls"), user("in2", "m2")]
    view = OpencodeV2Transcript([*steps, assistant("a2")], True)
    where = {"m1": "in1", "m2": "in2"}
    assert view.answers(where) == {"m1": "a2", "m2": "a2"}
    assert [(t.key, t.msg_ids) for t in view.turns(where)] == [("in1", ("m1", "m2"))]


def test_an_envelope_is_found_only_at_a_lines_start_of_an_input() -> None:
    """An envelope begins a line of a user input; quoted text or an answer is no home."""
    quoted = {"id": "in2", "type": "user", "text": 'see <swarm_message msg_id="m9">'}
    said = {**assistant("a1"), "text": '<swarm_message msg_id="m8">'}
    view = OpencodeV2Transcript([user("in1", "m1", "m2"), quoted, said], True)
    assert dict(view.homes) == {"m1": "in1", "m2": "in1"}


def test_an_idle_marker_ends_the_turn_and_keeps_inputs_apart() -> None:
    """An idle marker ends a turn (steps of tool calls included) and the next input starts
    another, even with no assistant message between them."""
    idle = {"id": "i1", "type": "idle", "outcome": "interrupted"}
    messages = [user("in1", "m1"), assistant("a1", finish="tool-calls"), idle, user("in2", "m2")]
    view = OpencodeV2Transcript(messages, True)
    assert [t.msg_ids for t in view.turns({"m1": "in1", "m2": "in2"})] == [("m1",)]
    assert view.answers({"m1": "in1", "m2": "in2"}) == {}
    answered = OpencodeV2Transcript([*messages, assistant("a2"), {**idle, "id": "i2"}], True)
    assert answered.answers({"m1": "in1", "m2": "in2"}) == {"m2": "a2"}
