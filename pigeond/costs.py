"""What a turn cost, and what turns cost together: the types shared by the transcript
readers, the storage package, the API, ``pigeon threads`` and the TUI.

A *turn* is what a hand-off caused in its target: the model calls from the prompt that
carried the envelope(s) to the reply that ended it.  Its usage is read from the target's
transcript (notes/costs.md has the shapes): opencode 1.x writes ``tokens`` and ``cost``
(US dollars) on every assistant message; Claude Code writes the API's ``usage`` (tokens)
but no cost per message, so a Claude Code turn's cost is *unknown* (None), never 0: a sum
that holds such a turn says how many, rather than look cheaper than it was.

Token kinds are kept apart (input, output, reasoning, cache reads, cache writes) and
``tokens`` is their sum: opencode counts its ``input`` without the cached part, so the
five never overlap.  Stdlib only: the CLIs and the TUI import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """The tokens and cost of one turn (or one model call of it); ``cost`` None: unknown."""

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float | None = None

    @property
    def tokens(self) -> int:
        return self.input + self.output + self.reasoning + self.cache_read + self.cache_write

    def plus(self, other: TurnUsage) -> TurnUsage:
        """Both together; the cost is unknown when either's is."""
        cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        return TurnUsage(
            self.input + other.input, self.output + other.output,
            self.reasoning + other.reasoning, self.cache_read + other.cache_read,
            self.cache_write + other.cache_write, cost,
        )  # fmt: skip


def usage_sum(usages: Iterable[TurnUsage], *, cost_known: bool = True) -> TurnUsage:
    """The sum of ``usages`` (none: zero tokens, and a cost of 0 when ``cost_known``)."""
    total = TurnUsage(cost=0.0 if cost_known else None)
    for usage in usages:
        total = total.plus(usage)
    return total


@dataclass(frozen=True, slots=True)
class EndedTurn:
    """A turn that has ended in a target's transcript: ``key`` is the transcript's id of
    where it started (opencode's user message, Claude Code's entry), unique in that
    session; ``msg_ids`` the hand-offs whose envelopes it consumed."""

    key: str
    msg_ids: tuple[str, ...]
    usage: TurnUsage
    # the transcript read began inside the turn: ``usage`` has only its newest steps
    partial: bool = False


@dataclass(frozen=True, slots=True)
class CostTotals:
    """The recorded turns of a thread or a session, summed.  ``cost`` sums the turns whose
    cost is known; ``cost_unknown_turns`` counts the others (a Claude Code turn)."""

    turns: int = 0
    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0
    cost_unknown_turns: int = 0

    @property
    def tokens(self) -> int:
        return self.input + self.output + self.reasoning + self.cache_read + self.cache_write

    def view(self) -> dict[str, Any]:
        """The JSON shape of ``GET /swarm/costs`` and ``pigeon threads --json``."""
        return {
            "turns": self.turns,
            "tokens": self.tokens,
            "input_tokens": self.input,
            "output_tokens": self.output,
            "reasoning_tokens": self.reasoning,
            "cache_read_tokens": self.cache_read,
            "cache_write_tokens": self.cache_write,
            "cost": self.cost,
            "cost_unknown_turns": self.cost_unknown_turns,
        }


NO_COST = CostTotals()


def format_tokens(tokens: int) -> str:
    """``52,310``: thousands grouped, as a person reads a budget."""
    return f"{tokens:,}"


def format_cost(cost: float | None, unknown_turns: int = 0) -> str:
    """``$0.0123`` (four decimals below a dollar, two above); ``unknown`` when nothing is
    known; ``$0.0123+?`` when some turns' cost is unknown."""
    if cost is None:
        return "unknown"
    shown = f"${cost:,.2f}" if abs(cost) >= 1 else f"${cost:.4f}"
    return shown + ("+?" if unknown_turns else "")


def cost_shown(totals: CostTotals) -> str:
    """The cost of ``totals`` as :func:`format_cost` shows it: ``unknown`` when every turn's
    cost is, ``+?`` when some are."""
    known = totals.turns == 0 or totals.turns > totals.cost_unknown_turns
    return format_cost(totals.cost if known else None, totals.cost_unknown_turns)


def format_totals(totals: CostTotals) -> str:
    """One line: ``3 turns, 1,204 tokens, $0.0123``."""
    turns = "1 turn" if totals.turns == 1 else f"{totals.turns} turns"
    return f"{turns}, {format_tokens(totals.tokens)} tokens, {cost_shown(totals)}"
