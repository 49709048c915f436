"""How ``pigeon`` and ``pigeon-tui`` show messages: declared once for both.

Ages, times, a message's destination, the table columns, the detail view of one
message and the "next retry" of a target are worded here, so the two front ends
cannot drift apart.  Text is returned *raw*: each front end escapes it with
``terminal.visible`` where it draws (``pigeon``'s table printer, the TUI's table
filler), so no path draws a field unescaped and none escapes it twice.  Widths,
though, are measured on the escaped form, which is what takes room on screen, and
cuts fall between characters, never inside an escape such as ``\\x1b``.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Final

from pigeond.envelope import render_envelope
from pigeond.model import State, StoredMessage
from pigeond.owed_replies import Obligation, Owed
from pigeond.storage.operator import FailedTarget, TargetQueue
from pigeond.terminal import visible

# Every state in lifecycle order: what counts and state filters list.
STATES: Final = tuple(state.value for state in State)
# The per-message columns of ``pigeon ls`` (text and JSON) and of the TUI's table.
LS_COLUMNS: Final = (
    "msg_id", "state", "to", "from", "kind", "priority", "attempts", "age", "last_error",
)  # fmt: skip
TABLE_COLUMNS: Final = ("msg_id", "state", "to", "from", "kind", "attempts", "age", "last_error")
# Columns cut in the middle when too wide: both ends of an id or a name tell it apart.
MIDDLE_CUT: Final = frozenset({"msg_id", "to", "from", "kind"})
# Columns of ``swarm_messages`` holding unix milliseconds, shown as UTC times.
TIME_COLUMNS: Final = frozenset(
    {"next_retry_at", "created_at", "updated_at", "handed_off_at", "verified_at", "verify_by",
     "expires_at", "answered_at", "handoff_intent_at"}
)  # fmt: skip
# The two counts by state of ``pigeon stats`` and the TUI's overview: every delivery
# (``count_by_state``: direct messages and channel members' copies) and every row of a
# channel (``count_channel_by_state``: the channel messages, ``fanned_out``, and the copies).
DELIVERIES_TITLE: Final = "deliveries (direct messages and channel members' copies)"
CHANNEL_TITLE: Final = "channel messages and members' copies"
# The per-target summaries: ``pigeon stats`` and the TUI's overview.
QUEUE_COLUMNS: Final = ("target", "queued", "oldest", "next retry")
FAILED_COLUMNS: Final = ("target", "failed", "latest error")
# Who owes whom a reply: ``pigeon owed`` and the TUI's owed view.
OWED_COLUMNS: Final = (
    "debtor",
    "owes reply to",
    "creditor",
    "kind",
    "state",
    "next step",
    "first line",
)
ELLIPSIS: Final = "…"


def format_age(ms: int) -> str:
    """The largest whole unit: ``45s``, ``3m``, ``2h``, ``9d`` (never negative)."""
    seconds = max(ms, 0) // 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_time(ms: int | None) -> str:
    """Unix milliseconds as a UTC time to the millisecond; ``-`` for none."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def destination(message: StoredMessage) -> str:
    """The target session, or ``#name`` for a channel message."""
    return message.to_session if message.to_session is not None else f"#{message.channel}"


def next_retry(next_retry_at: int | None, now_ms: int) -> str:
    """When a target's queue is next tried: ``now`` when due, else ``in 30s``; ``-`` when
    nothing live waits (every queued message has expired and awaits the sweep)."""
    if next_retry_at is None:
        return "-"
    if next_retry_at <= now_ms:
        return "now"
    return "in " + format_age(next_retry_at - now_ms + 999)  # round up: "in 0s" is not "now"


def one_line(text: str | None) -> str:
    """Free text (an error, a payload) on one line, runs of white space as one space."""
    return " ".join(text.split()) if text else ""


def cell_width(shown: str) -> int:
    """Terminal cells ``shown`` (already escaped) takes: wide East Asian characters and
    emoji two, combining marks none, anything else one."""
    if shown.isascii():
        return len(shown)
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in shown
    )


def shown_width(text: str) -> int:
    """Terminal cells ``text`` takes once escaped."""
    return cell_width(visible(text))


def cut(text: str, width: int | None, *, middle: bool = False) -> str:
    """``text``, cut between characters so that its escaped form fits ``width``.

    ``…`` marks the cut: at the end, or in the middle (``middle``), which keeps
    both ends of an id.  ``None`` leaves the text whole.
    """
    if width is None or shown_width(text) <= width:
        return text
    budget = max(width - 1, 0)
    if not middle:
        return "".join(_take(text, budget)) + ELLIPSIS
    head = _take(text, budget - budget // 2)
    tail = _take(reversed(text), budget // 2)
    return "".join(head) + ELLIPSIS + "".join(reversed(tail))


def _take(chars: Iterable[str], budget: int) -> list[str]:
    kept: list[str] = []
    used = 0
    for char in chars:
        used += shown_width(char)
        if used > budget:
            break
        kept.append(char)
    return kept


CELLS: Final[Mapping[str, Callable[[StoredMessage, int], str]]] = {
    "msg_id": lambda m, now: m.msg_id,
    "state": lambda m, now: m.state,
    "to": lambda m, now: destination(m),
    "from": lambda m, now: m.from_session,
    "kind": lambda m, now: m.kind,
    "priority": lambda m, now: m.priority,
    "attempts": lambda m, now: str(m.attempts),
    "age": lambda m, now: format_age(now - m.created_at),
    "last_error": lambda m, now: one_line(m.last_error),
}


def message_cells(
    message: StoredMessage,
    now_ms: int,
    columns: Sequence[str],
    widths: Mapping[str, int | None] | None = None,
) -> list[str]:
    """One table row: each column's text, cut to its width in ``widths`` (if any)."""
    widths = widths or {}
    return [
        cut(CELLS[name](message, now_ms), widths.get(name), middle=name in MIDDLE_CUT)
        for name in columns
    ]


def column_widths(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's width: the cells its widest cell (or heading) takes, escaped."""
    return [max(shown_width(row[i]) for row in [header, *rows]) for i in range(len(header))]


def last_column_width(
    header: Sequence[str], rows: Sequence[Sequence[str]], total: int, *, gap: int, least: int
) -> int:
    """How wide the last column may be so that every column fits in ``total`` cells,
    each column as wide as its widest cell plus ``gap``; never less than ``least``."""
    used = sum(width + gap for width in column_widths(header, rows)[:-1])
    return max(total - used - gap, least)


def queue_cells(queue: TargetQueue, now_ms: int) -> list[str]:
    """One target's queue: the target, how many, the oldest's age, the next retry."""
    return [
        queue.target, str(queue.queued), format_age(now_ms - queue.oldest_created_at),
        next_retry(queue.next_retry_at, now_ms),
    ]  # fmt: skip


def owed_cells(obligation: Obligation, now_ms: int) -> list[str]:
    """One outstanding obligation: who owes which message to whom, and what comes next
    (the reminder, then the overdue notice; ``-`` before the hand-off and once overdue)."""
    due = obligation.due_at
    step = {Owed.OPEN: "reminder ", Owed.REMINDED: "overdue "}.get(Owed(obligation.state), "")
    return [
        obligation.debtor, obligation.msg_id, obligation.creditor, obligation.kind,
        obligation.state, "-" if due is None else step + next_retry(due, now_ms),
        obligation.first_line,
    ]  # fmt: skip


def failed_cells(failed: FailedTarget) -> list[str]:
    return [failed.target, str(failed.failed), one_line(failed.latest_error)]


def json_row(message: StoredMessage, now_ms: int) -> dict[str, object]:
    """One ``ls --json`` row: the ``ls`` columns, age in whole seconds, last_error in full."""
    return {
        "msg_id": message.msg_id,
        "state": message.state,
        "to": destination(message),
        "from": message.from_session,
        "kind": message.kind,
        "priority": message.priority,
        "attempts": message.attempts,
        "age": max(now_ms - message.created_at, 0) // 1000,
        "last_error": message.last_error,
    }


@dataclasses.dataclass(frozen=True, slots=True)
class Detail:
    """One message as ``pigeon show`` and the TUI's detail pane show it."""

    # every column but the payload (times as UTC), then the receipt stage, then age
    fields: list[tuple[str, str]]
    payload: str
    envelope: str  # exactly what the target receives

    @property
    def name_width(self) -> int:
        return max(len(name) for name, _ in self.fields)


def detail(message: StoredMessage, now_ms: int) -> Detail:
    fields: list[tuple[str, str]] = []
    for name, value in dataclasses.asdict(message).items():
        if name == "payload":
            continue
        if name in TIME_COLUMNS:
            fields.append((name, format_time(value)))
        else:
            fields.append((name, "-" if value is None else str(value)))
    fields.append(("to_runtime", message.to_runtime or "-"))  # how the target takes it
    fields.append(("receipt", message.receipt()))
    fields.append(("age", format_age(now_ms - message.created_at)))
    return Detail(fields, message.payload, render_envelope(message))


def state_counts(counts: Mapping[str, int], *, zeros: bool) -> list[tuple[str, int]]:
    """Counts by state in lifecycle order (states this version does not know last);
    ``zeros`` lists the states a delivery can be in that have none too (``fanned_out``,
    a channel message's own state, only when some are)."""
    listed = [s for s in STATES if counts.get(s) or (zeros and s != State.FANNED_OUT)]
    known = [(s, counts.get(s, 0)) for s in listed]
    return known + sorted((s, n) for s, n in counts.items() if s not in STATES)


def table_lines(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, indent: str = ""
) -> list[str]:
    """Aligned columns, two spaces apart; every cell is escaped here, so callers pass
    raw values."""
    widths = column_widths(header, rows)
    return [
        indent
        + "  ".join(
            visible(cell) + " " * (width - shown_width(cell))
            for cell, width in zip(row, widths, strict=True)
        ).rstrip()
        for row in [header, *rows]
    ]
