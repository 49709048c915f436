"""What the TUI reads and writes, as plain functions run in worker threads.

Each call opens its own connection with ``open_existing`` (sqlite connections
belong to the thread that made them) and closes it before returning, so the
UI thread never touches the database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pigeond.model import StoredMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.operator import ActionOutcome, FailedTarget, TargetQueue, open_existing

WINDOW = 500

# The state selector: tab id -> the ``state`` column value (None: every state).
STATES: dict[str, str | None] = {
    "queued": "queued",
    "failed": "failed",
    "delivered": "handed_off",
    "expired": "expired",
    "cancelled": "cancelled",
    "all": None,
}

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Snapshot:
    direct: dict[str, int]
    channel: dict[str, int]
    queued: list[TargetQueue]
    failed: list[FailedTarget]
    messages: list[StoredMessage]


@contextmanager
def repository(path: Path | str) -> Iterator[SwarmRepository]:
    repo = SwarmRepository(open_existing(path))
    try:
        yield repo
    finally:
        repo.close()


def read_snapshot(path: Path | str, state: str | None, text: str, page: int = 0) -> Snapshot:
    """Counts, summaries, and one window (``page``) of the messages the view lists."""
    with repository(path) as repo:
        if text:
            messages = repo.search_messages(state, text, WINDOW, page * WINDOW)
        else:
            messages = repo.list_messages(state=state, limit=WINDOW, offset=page * WINDOW)
        return Snapshot(
            direct=repo.count_by_state(),
            channel=repo.count_channel_by_state(),
            queued=repo.queued_per_target(),
            failed=repo.failed_per_target(),
            messages=messages,
        )


ONE_ACTIONS: dict[str, Callable[[SwarmRepository], Callable[[str, int, int], ActionOutcome]]] = {
    "requeue": lambda repo: repo.requeue,
    "retry-now": lambda repo: repo.retry_now,
    "cancel": lambda repo: repo.cancel,
}
TARGET_ACTIONS: dict[str, Callable[[SwarmRepository], Callable[[str, int], list[str]]]] = {
    "requeue": lambda repo: repo.requeue_target,
    "cancel": lambda repo: repo.cancel_target,
}


def act_one(path: Path | str, action: str, msg_id: str, seen: int, now_ms: int) -> ActionOutcome:
    """One conditional write, only if the row still has the ``updated_at`` the operator saw."""
    with repository(path) as repo:
        return ONE_ACTIONS[action](repo)(msg_id, now_ms, seen)


def act_many(
    path: Path | str, action: str, seen: Sequence[tuple[str, int]], now_ms: int
) -> dict[ActionOutcome, int]:
    """The same conditional write for every listed row; how many ended each way."""
    outcomes: dict[ActionOutcome, int] = {}
    with repository(path) as repo:
        act = ONE_ACTIONS[action](repo)
        for msg_id, updated_at in seen:
            outcome = act(msg_id, now_ms, updated_at)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


def act_target(path: Path | str, action: str, target: str, now_ms: int) -> list[str]:
    with repository(path) as repo:
        return TARGET_ACTIONS[action](repo)(target, now_ms)
