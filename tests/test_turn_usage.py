"""What a hand-off's turn used, read in transcripts: opencode 1.18.33 and 1.15.4 (captured
from the real servers, tests/fixtures/opencode/), Claude Code (tests/fixtures/claude/),
and the shared types and their formatting (pigeond/costs.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pigeond.costs import CostTotals, EndedTurn, TurnUsage, format_cost, format_totals
from pigeond.delivery import claude_usage, opencode_usage
from pigeond.delivery.claude_transcript import envelope_homes, parse_lines
from testkit.messages import assistant_entry, user_entry

FIXTURES = Path(__file__).parent / "fixtures"
ABORTED = {"name": "MessageAbortedError", "data": {"message": "Aborted"}}


def captured(version: str) -> list[dict[str, Any]]:
    """A real transcript: a plain prompt, then a prompt whose turn called a tool (glob),
    with the fake model priced at $3/$15 per million input/output tokens."""
    loaded = json.loads((FIXTURES / "opencode" / f"usage-{version}.json").read_text())
    assert isinstance(loaded, list)
    return loaded


def user_ids(messages: list[dict[str, Any]]) -> list[str]:
    return [m["info"]["id"] for m in messages if m["info"]["role"] == "user"]


# -- opencode, on captured transcripts -------------------------------------------------


@pytest.mark.parametrize("version", ["1.18.33", "1.15.4"])
def test_a_one_step_turn_is_the_tokens_and_cost_opencode_wrote(version: str) -> None:
    """The fake model's 10 input tokens and its words out, at its configured price."""
    messages = captured(version)
    plain, _ = user_ids(messages)
    [turn] = opencode_usage.ended_turns(messages, {"msg_a": plain})
    assert turn.key == plain and turn.msg_ids == ("msg_a",)
    assert (turn.usage.input, turn.usage.output, turn.usage.tokens) == (10, 2, 12)
    assert turn.usage.cost == pytest.approx(10 * 3e-6 + 2 * 15e-6)


@pytest.mark.parametrize(("version", "output"), [("1.18.33", 10), ("1.15.4", 11)])
def test_a_turn_that_called_a_tool_sums_its_steps(version: str, output: int) -> None:
    """Two assistant messages (the tool call, then the reply) are one turn: both summed."""
    messages = captured(version)
    _, tool_turn = user_ids(messages)
    [turn] = opencode_usage.ended_turns(messages, {"msg_b": tool_turn})
    assert (turn.usage.input, turn.usage.output) == (20, output)
    assert turn.usage.cost == pytest.approx(20 * 3e-6 + output * 15e-6)


def test_each_turn_of_a_transcript_is_its_own() -> None:
    """Two hand-offs in two prompts: two turns, each with its own usage."""
    messages = captured("1.18.33")
    first, second = user_ids(messages)
    turns = opencode_usage.ended_turns(messages, {"msg_a": first, "msg_b": second})
    assert {t.key: t.usage.tokens for t in turns} == {first: 12, second: 30}


# -- opencode, the turn's end ------------------------------------------------------------


def test_a_batch_is_one_turn_with_all_its_msg_ids() -> None:
    """Three envelopes in one prompt: one turn, naming all three."""
    transcript = [user_entry("u1", "<a>", "<b>", "<c>"), assistant_entry("a1", "u1", tokens=(7, 3))]
    homes = {"msg_c": "u1", "msg_a": "u1", "msg_b": "u1"}
    assert opencode_usage.ended_turns(transcript, homes) == [
        EndedTurn("u1", ("msg_a", "msg_b", "msg_c"), TurnUsage(7, 3, cost=0.0))
    ]


@pytest.mark.parametrize(
    "last_step",
    [
        assistant_entry("a2", "u1", None, finish=None, completed=False),
        assistant_entry("a2", "u1", "calling", finish="tool-calls"),
        assistant_entry("a2", "u1", "more", finish="unknown"),
    ],
    ids=["streaming", "tool-calls", "unknown"],
)
def test_a_turn_still_running_is_not_read(last_step: dict[str, Any]) -> None:
    """Its sum would still grow: nothing is counted until the loop ends."""
    transcript = [user_entry("u1", "<a>"), assistant_entry("a1", "u1", None, finish="tool-calls"),
                  last_step]  # fmt: skip
    assert opencode_usage.ended_turns(transcript, {"msg_a": "u1"}) == []


def test_an_aborted_turn_is_counted_with_what_it_used() -> None:
    """A turn that ended in an error answered nothing, but its model calls were paid for."""
    transcript = [
        user_entry("u1", "<a>"),
        assistant_entry("a1", "u1", None, finish="tool-calls", tokens=(10, 5), cost=0.5),
        assistant_entry("a2", "u1", None, finish=None, error=ABORTED, tokens=(10, 1), cost=0.25),
    ]
    [turn] = opencode_usage.ended_turns(transcript, {"msg_a": "u1"})
    assert (turn.usage.tokens, turn.usage.cost) == (26, 0.75)


def test_a_message_consumed_by_a_later_prompts_turn_counts_in_that_turn() -> None:
    """Two prompts that reached the model in one call: the reply's parent is the later one."""
    transcript = [user_entry("u1", "<a>"), user_entry("u2", "<b>"),
                  assistant_entry("a1", "u2", tokens=(4, 4))]  # fmt: skip
    [turn] = opencode_usage.ended_turns(transcript, {"msg_a": "u1", "msg_b": "u2"})
    assert (turn.key, turn.msg_ids, turn.usage.tokens) == ("u2", ("msg_a", "msg_b"), 8)


@pytest.mark.parametrize(
    "info",
    [{}, {"tokens": "many", "cost": "free"}, {"tokens": {"input": -4, "cache": 3}, "cost": -1},
     {"tokens": {"input": True, "output": 1.9e99}, "cost": float("nan")}],
    ids=["missing", "not objects", "negative", "odd numbers"],
)  # fmt: skip
def test_what_is_not_a_count_counts_nothing(info: dict[str, Any]) -> None:
    """A field of another shape (a later opencode, a broken write) is 0, never an error."""
    usage = opencode_usage.message_usage(info)
    assert usage.input == 0 and usage.cache_read == 0 and usage.cost == 0.0


@pytest.mark.parametrize(("complete", "partial"), [(False, True), (True, False)])
def test_a_turn_begun_before_the_messages_read_is_partial(complete: bool, partial: bool) -> None:
    """Only the newest steps were read (not the whole transcript): the sum is marked partial."""
    newest = [assistant_entry("a9", "u1", None, finish="tool-calls"), assistant_entry("a10", "u1")]
    [turn] = opencode_usage.ended_turns(newest, {"msg_a": "u1"}, complete=complete)
    assert turn.partial is partial


# -- Claude Code ---------------------------------------------------------------------


def claude(name: str) -> list[dict[str, Any]]:
    return parse_lines((FIXTURES / "claude" / f"{name}.jsonl").read_bytes())


def test_a_claude_code_turn_has_its_tokens_and_an_unknown_cost() -> None:
    """The Stop hook's envelope, then one reply: the API's usage, no cost per message."""
    entries = claude("stop_block")
    where = {m: h for m, h in envelope_homes(entries).items()}
    [turn] = claude_usage.ended_turns(entries, where)
    assert (turn.usage.input, turn.usage.output, turn.usage.cost) == (10, 5, None)


def test_a_claude_code_turn_that_called_a_tool_sums_its_api_messages() -> None:
    """The tool call's API message and the reply's: two model calls, both counted."""
    entries = claude("mcp_tool")
    first_user = next(e["uuid"] for e in entries if e.get("type") == "user")
    [turn] = claude_usage.ended_turns(entries, {"msg_a": first_user})
    assert (turn.usage.input, turn.usage.output) == (20, 10)


def test_one_api_message_split_over_entries_is_counted_once() -> None:
    """Claude Code writes one entry per content block, each repeating the message's usage."""
    usage = {"input_tokens": 100, "output_tokens": 40, "cache_read_input_tokens": 7}

    def block(uuid: str, kind: str, stop: str | None) -> dict[str, Any]:
        content = [{"type": "text", "text": "hi"}] if kind == "text" else [{"type": kind}]
        return {"type": "assistant", "uuid": uuid, "message": {
            "id": "msg_api_1", "role": "assistant", "model": "claude", "stop_reason": stop,
            "content": content, "usage": usage}}  # fmt: skip

    entries = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "<env>"}},
        block("b1", "thinking", None),
        block("b2", "text", "end_turn"),
    ]
    [turn] = claude_usage.ended_turns(entries, {"msg_a": "u1"})
    assert (turn.key, turn.usage.tokens) == ("b2", 147)


def test_a_claude_code_turn_without_a_reply_yet_is_not_read() -> None:
    """Nothing says it ended: it is left for a later look."""
    entries = claude("stop_block")
    last_user = [e["uuid"] for e in entries if e.get("type") == "user"][-1]
    cut = entries[: next(n for n, e in enumerate(entries) if e.get("uuid") == last_user) + 1]
    assert claude_usage.ended_turns(cut, {"msg_a": last_user}) == []


def test_a_claude_code_turn_begun_before_the_entries_read_is_partial() -> None:
    """The envelope's entry is not among the newest entries read: partial."""
    entries = claude("stop_block")
    reply_at = max(n for n, e in enumerate(entries) if e.get("type") == "assistant")
    [turn] = claude_usage.ended_turns(entries[reply_at:], {"msg_a": "gone"}, complete=False)
    assert turn.partial


# -- the shared types ----------------------------------------------------------------


def test_a_sum_with_an_unknown_cost_is_unknown() -> None:
    """A turn of unknown cost makes the sum's cost unknown, never smaller."""
    assert TurnUsage(1, cost=0.5).plus(TurnUsage(2, cost=None)) == TurnUsage(3, cost=None)


@pytest.mark.parametrize(
    ("cost", "unknown", "shown"),
    [(None, 0, "unknown"), (0.0, 0, "$0.0000"), (0.01234, 0, "$0.0123"),
     (1234.5, 0, "$1,234.50"), (0.5, 2, "$0.5000+?")],
)  # fmt: skip
def test_a_cost_is_shown_in_dollars(cost: float | None, unknown: int, shown: str) -> None:
    """Four decimals below a dollar, two above; "+?" when some turns' cost is unknown."""
    assert format_cost(cost, unknown) == shown


def test_totals_read_as_one_line() -> None:
    """Turns, tokens grouped by thousands, cost."""
    assert format_totals(CostTotals(3, 50_000, 2_310, cost=0.25)) == (
        "3 turns, 52,310 tokens, $0.2500"
    )
    assert format_totals(CostTotals(1, 10, cost_unknown_turns=1)) == "1 turn, 10 tokens, unknown"
