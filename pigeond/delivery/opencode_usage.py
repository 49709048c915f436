"""What a hand-off's turn cost, read in an opencode transcript (``GET /session/<id>/message``).

What opencode 1.15.4 and 1.18.33 write (probed on the real servers; notes/costs.md, and
the captured transcripts in tests/fixtures/opencode/): every assistant message's ``info``
has ``tokens`` ``{"total", "input", "output", "reasoning", "cache": {"read", "write"}}``
and ``cost`` (US dollars, from the model's price in opencode's config: 0 when it has
none); each assistant message is one model call (a step), so a turn that calls tools is
several of them, all naming the turn's user message as ``parentID``.

A turn has *ended* when its newest assistant message is completed (``time.completed``)
and either ended the loop (a finish other than ``tool-calls``/``unknown``) or failed
(``error``): its usage is the sum over all its assistant messages.  A turn still running
is not read: its sum would grow.  A turn of more steps than the newest messages read
(:data:`~pigeond.delivery.opencode_transcript.RECENT_MESSAGES` at least) is *partial*
there: the verifier reads the whole transcript once for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pigeond.costs import EndedTurn, TurnUsage, usage_sum
from pigeond.delivery.answers import TURN_GOES_ON, Steps, consumers_in, steps_of


def _number(value: object) -> int:
    """A token count as written, or 0 (missing, negative, not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return 0
    return max(0, int(value))


def message_usage(info: Mapping[str, Any]) -> TurnUsage:
    """The tokens and cost of one assistant message's ``info`` (zeros where absent; a cost
    that is not a number is 0: opencode writes 0 for a model without a price)."""
    tokens = info.get("tokens")
    tokens = tokens if isinstance(tokens, dict) else {}
    cache = tokens.get("cache")
    cache = cache if isinstance(cache, dict) else {}
    cost = info.get("cost")
    price = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else 0.0
    return TurnUsage(
        input=_number(tokens.get("input")),
        output=_number(tokens.get("output")),
        reasoning=_number(tokens.get("reasoning")),
        cache_read=_number(cache.get("read")),
        cache_write=_number(cache.get("write")),
        cost=price if price == price and price > 0 else 0.0,  # NaN and below 0: none
    )


def _ended(info: Mapping[str, Any]) -> bool:
    time = info.get("time")
    if not isinstance(time, dict) or time.get("completed") is None:
        return bool(info.get("error"))  # an aborted step may have no completion time
    finish = info.get("finish")
    return bool(info.get("error")) or (isinstance(finish, str) and finish not in TURN_GOES_ON)


def ended_turns(
    messages: Sequence[Mapping[str, Any]],
    homes: Mapping[str, str],
    *,
    complete: bool = True,
    index: Steps | None = None,
) -> list[EndedTurn]:
    """The ended turns that consumed the msg_ids of ``homes`` (each mapped to the user
    message that carried its envelope), one per consuming user message, with their usage;
    ``partial`` when ``messages`` is not the whole transcript (``complete``) and begins
    after that user message.  ``index``: :func:`~pigeond.delivery.answers.steps_of`
    ``messages``, when already built."""
    index = steps_of(messages) if index is None else index
    consumers, steps = consumers_in(messages, homes, index)
    read_users = index.ids
    by_consumer: dict[str, list[str]] = {}
    for msg_id, consumer in consumers.items():
        by_consumer.setdefault(consumer, []).append(msg_id)
    turns = []
    for consumer, msg_ids in by_consumer.items():
        infos = [m.get("info") for m in steps[consumer]]
        infos_ok = [i for i in infos if isinstance(i, dict)]
        if not infos_ok or not _ended(infos_ok[-1]):
            continue
        usage = usage_sum(message_usage(info) for info in infos_ok)
        partial = not complete and consumer not in read_users
        turns.append(EndedTurn(consumer, tuple(sorted(msg_ids)), usage, partial))
    return turns
