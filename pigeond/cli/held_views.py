"""How threads and brake-held messages look, and what a release or drop says: the words
``pigeon threads``, ``pigeon held``, ``release`` and ``drop`` (pigeond/cli/pigeon_held.py)
and the TUI's threads and held views share.

A module of its own, apart from the ``pigeon`` verbs, so the TUI borrows the words
without importing a command-line entry point.
"""

from __future__ import annotations

from typing import Final

from pigeond.cli.presentation import cut, format_age, one_line
from pigeond.costs import CostTotals, cost_shown, format_tokens
from pigeond.storage import SwarmRepository
from pigeond.storage.brake_holds import HeldMessage, HoldOutcome, ReleaseMode
from pigeond.storage.threads import ThreadInfo

THREADS_COLUMNS: Final = (
    "thread", "hops", "limit", "turns", "messages", "held", "tokens", "cost", "updated",
)  # fmt: skip
HELD_COLUMNS: Final = ("msg_id", "from", "to", "thread", "brake", "age", "reason", "payload")
REASON_WIDTH, PREVIEW_WIDTH = 60, 40


def thread_cells(thread: ThreadInfo, costs: CostTotals, now_ms: int) -> list[str]:
    """A thread's cells under :data:`THREADS_COLUMNS` (``pigeon threads``, the TUI's
    threads view); limit ``-``: the option's (max_hops_per_thread)."""
    t = thread
    return [
        t.thread_id, str(t.hops), "-" if t.hop_limit is None else str(t.hop_limit),
        str(t.turns), str(t.messages), str(t.held), format_tokens(costs.tokens),
        cost_shown(costs), format_age(now_ms - t.updated_at),
    ]  # fmt: skip


def held_cells(held: HeldMessage, now_ms: int) -> list[str]:
    """A held message's cells under :data:`HELD_COLUMNS` (``pigeon held``, the TUI's held
    view), the reason and payload on one line and cut."""
    h = held
    return [
        h.msg_id, h.from_session, h.to_session or f"#{h.channel}", h.thread_id or "-",
        h.brake, format_age(now_ms - h.created_at), cut(one_line(h.reason), REASON_WIDTH),
        cut(one_line(h.preview), PREVIEW_WIDTH),
    ]  # fmt: skip


def why_not_done(
    repo: SwarmRepository | None, msg_id: str, outcome: HoldOutcome, other_modes: str
) -> str:
    """Why a release or drop of ``msg_id`` changed nothing, in one line; ``other_modes``
    says how else to release a message whose brake has no limit to raise.  With ``repo``,
    a message not held by a brake says what it is instead."""
    if outcome is HoldOutcome.NOT_HELD and repo is not None:
        message = repo.get(msg_id)
        if message is not None:
            held_by = "" if message.hold_kind is None else f", held by {message.hold_kind}"
            return f"not held by a brake (state {message.state}{held_by})"
    elif outcome is HoldOutcome.NOT_RAISABLE:
        return f"its brake has no limit to raise; {other_modes}"
    return str(outcome.value)


def released_line(msg_id: str, mode: ReleaseMode, by: int) -> str:
    """What a release that was done says: ``msg_…: released (raise by 12)``."""
    extra = f" by {by}" if mode is ReleaseMode.RAISE else ""
    return f"{msg_id}: released ({mode.value}{extra})"


def dropped_line(msg_id: str) -> str:
    """What a drop that was done says."""
    return f"{msg_id}: dropped by a person (its sender is told)"
