"""What a hand-off's turn used, read in a Claude Code transcript (tokens; cost unknown).

What Claude Code 2.1.332 writes (tests/fixtures/claude/): every assistant entry's
``message`` carries the API's ``usage`` (``input_tokens``, ``output_tokens``,
``cache_read_input_tokens``, ``cache_creation_input_tokens``,
``output_tokens_details.thinking_tokens``), and one API message split over several
entries (one content block each) repeats the same ``usage`` under the same
``message.id``: it is counted once.  No entry has a turn's cost: a ``cost-state`` entry
holds the session's running total in dollars (``totalCostUSD``), written when Claude
Code pleases, so a turn's cost is left *unknown* (None) rather than guessed.

A turn has *ended* once a reply (:func:`~pigeond.delivery.claude_transcript.is_reply`)
follows the envelope's entry; its usage is that of the assistant entries from the
envelope's entry to that reply.  A turn that ends without a reply (an API error, a tool
call cut short) is not counted: nothing in the transcript says it ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pigeond.costs import EndedTurn, TurnUsage, usage_sum
from pigeond.delivery.claude_transcript import SYNTHETIC_MODEL, is_reply


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(0, value)


def _api_message(entry: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The API message of a main-thread assistant entry pigeond should count (not a
    stand-in Claude Code wrote, not a subagent's)."""
    message = entry.get("message")
    if (
        entry.get("type") != "assistant"
        or entry.get("isSidechain") is True
        or not isinstance(message, dict)
        or message.get("model") == SYNTHETIC_MODEL
    ):
        return None
    return message


def entry_usage(message: Mapping[str, Any]) -> TurnUsage:
    """The tokens of one API message's ``usage``; its cost unknown."""
    usage = message.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("output_tokens_details")
    details = details if isinstance(details, dict) else {}
    return TurnUsage(
        input=_count(usage.get("input_tokens")),
        output=_count(usage.get("output_tokens")),
        reasoning=_count(details.get("thinking_tokens")),
        cache_read=_count(usage.get("cache_read_input_tokens")),
        cache_write=_count(usage.get("cache_creation_input_tokens")),
        cost=None,
    )


def ended_turns(
    entries: Sequence[Mapping[str, Any]], where: Mapping[str, str], *, complete: bool = True
) -> list[EndedTurn]:
    """The ended turns that consumed the msg_ids of ``where`` (each mapped to the uuid of
    the user entry that carried its envelope), keyed by the reply that ended them;
    ``partial`` when ``entries`` is not the whole transcript (``complete``) and begins after
    the envelope's entry."""
    position = {e.get("uuid"): n for n, e in enumerate(entries)}
    replies = [n for n, e in enumerate(entries) if is_reply(e)]
    spans: dict[int, tuple[int, list[str]]] = {}  # reply position -> (first home, msg_ids)
    for msg_id, home in where.items():
        start = position.get(home, -1)
        reply = next((n for n in replies if n > start), None)
        if reply is None:
            continue
        first, msg_ids = spans.get(reply, (start, []))
        spans[reply] = (min(first, start), [*msg_ids, msg_id])
    turns = []
    for reply, (start, msg_ids) in spans.items():
        seen: dict[str, TurnUsage] = {}
        for n in range(start + 1, reply + 1):
            message = _api_message(entries[n])
            if message is not None:
                key = message.get("id")
                seen[key if isinstance(key, str) else f"entry {n}"] = entry_usage(message)
        usage = usage_sum(seen.values(), cost_known=False)
        partial = not complete and start < 0
        turns.append(EndedTurn(str(entries[reply]["uuid"]), tuple(sorted(msg_ids)), usage, partial))
    return turns
