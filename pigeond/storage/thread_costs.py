"""Threads with what their turns cost: ``GET /swarm/threads``, ``pigeon threads`` and the
TUI show each thread's row (pigeond/storage/threads.py) beside its sums
(pigeond/storage/costs.py), read together in one read."""

from __future__ import annotations

from pigeond.costs import NO_COST, CostTotals
from pigeond.storage.repository import SwarmRepository
from pigeond.storage.threads import THREADS_LIMIT, ThreadInfo


def threads_with_costs(
    repo: SwarmRepository, limit: int = THREADS_LIMIT
) -> list[tuple[ThreadInfo, CostTotals]]:
    """The latest ``limit`` threads (as :meth:`~pigeond.storage.threads.Threads.threads`
    lists them), each with the sums of the turns its messages caused (zeros: none yet)."""
    threads = repo.threads(limit)
    costs = repo.thread_costs([t.thread_id for t in threads])
    return [(t, costs.get(t.thread_id, NO_COST)) for t in threads]


def thread_view(thread: ThreadInfo, costs: CostTotals) -> dict[str, object]:
    """A thread's fields, and its ``costs`` (:meth:`~pigeond.costs.CostTotals.view`)."""
    return {**thread.view(), "costs": costs.view()}
