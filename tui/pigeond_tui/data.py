"""What the TUI reads, as a plain function run in a worker thread.

Each read opens its own connection (:func:`pigeond.cli.actions.repository`:
sqlite connections belong to the thread that made them) and closes it before
returning, so the UI thread never touches the database.  The writes are the
operator actions of :mod:`pigeond.cli.actions`, run the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pigeond.cli.actions import queued_per_target, repository
from pigeond.cli.consent_views import consent_cells
from pigeond.cli.daemon_http import call_daemon
from pigeond.model import State, StoredMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.operator import FailedTarget, TargetQueue
from pigeond.storage.search import SearchQueryError

WINDOW = 500  # messages per page: the table never loads the whole queue
HEALTH_TIMEOUT_S = 1.0  # a read of /health; the TUI works from the database without it

# The state tabs: tab id -> the ``state`` column value (None: every state).
TABS: Final[dict[str, str | None]] = {
    "queued": State.QUEUED.value,
    "failed": State.FAILED.value,
    "delivered": State.HANDED_OFF.value,
    "expired": State.EXPIRED.value,
    "cancelled": State.CANCELLED.value,
    "all": None,
}


@dataclass(frozen=True, slots=True)
class Snapshot:
    direct: dict[str, int]
    channel: dict[str, int]
    queued: list[TargetQueue]
    failed: list[FailedTarget]
    messages: list[StoredMessage]
    # the policy column of "queued per target", by target (pigeond_tui/consent.py)
    consent: dict[str, str] = field(default_factory=dict)
    # msg_id -> the permission request its target waits on while handling it
    waiting: dict[str, str] = field(default_factory=dict)


def read_snapshot(
    path: Path | str, state: str | None, text: str, page: int, now_ms: int
) -> Snapshot:
    """Counts, per-target summaries as of ``now_ms``, and one window (``page``) of the
    messages the view lists."""
    with repository(path) as repo:
        if text:
            messages = _search(repo, state, text, page)
        else:
            messages = repo.list_messages(state=state, limit=WINDOW, offset=page * WINDOW)
        return Snapshot(
            direct=repo.count_by_state(),
            channel=repo.count_channel_by_state(),
            queued=queued_per_target(repo, now_ms),
            failed=repo.failed_per_target(),
            messages=messages,
            consent=consent_cells(repo),
            waiting={r.msg_id: r.waiting_on for r in repo.open_permissions()},
        )


def _search(repo: SwarmRepository, state: str | None, text: str, page: int) -> list[StoredMessage]:
    """One window of the messages with every word of ``text`` (full-text search, not a
    substring walk of the whole history); text with no word in it (``*``) finds nothing."""
    try:
        return repo.search(text, state=state, limit=WINDOW, offset=page * WINDOW)
    except SearchQueryError:
        return []


def health_line(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> str | None:
    """What the daemon at ``url`` says is wrong with opencode (``/health``'s
    ``opencode_problem``, e.g. an API it does not speak), or None: nothing wrong, or no
    daemon answering (the TUI reads the database, not the daemon)."""
    try:
        answer = call_daemon(url, "GET", "/health", None, timeout_s, None)
    except (OSError, TimeoutError, ValueError):
        return None
    problem = answer.body.get("opencode_problem")
    return problem if isinstance(problem, str) and problem else None
