"""What the TUI draws: the message table, the counts and the detail pane.

Every field is drawn escaped (``terminal.visible``) into ``Text`` objects, never
parsed as markup; the words and layout come from :mod:`pigeond.cli.presentation`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from rich.text import Text
from textual import events
from textual.message import Message
from textual.widgets import DataTable

from pigeond.cli.presentation import column_widths, detail, state_counts
from pigeond.model import StoredMessage
from pigeond.terminal import visible
from pigeond_tui.data import Snapshot

Rows: TypeAlias = Sequence[tuple[str, Sequence[str]]]  # (row key, raw cells)


class MessageTable(DataTable[Text]):
    """The message table.  It sees a key before the app's bindings do, so a row
    action's key that the highlighted row does not allow is answered here, with
    ``refuse(key)`` (a short notice, True), and goes no further; and it says when its
    size changes, so the app can fit last_error to the new width."""

    def __init__(self, refuse: Callable[[str], bool], *, id: str) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.refuse = refuse

    class Resized(Message):
        """The table's size changed: the room left for last_error with it."""

    def on_key(self, event: events.Key) -> None:
        if self.refuse(event.key):
            event.stop()
            event.prevent_default()

    def on_resize(self, event: events.Resize) -> None:
        self.post_message(self.Resized())


def counts_text(snapshot: Snapshot) -> Text:
    """Deliveries by state (zeros too: direct messages and channel members' copies), the
    channels' rows apart (channel messages and their copies)."""
    text = Text()
    text.append("deliveries\n", style="bold")
    for state, n in state_counts(snapshot.direct, zeros=True):
        text.append(f"  {visible(state):<11}{n:>8}\n")
    text.append("channel messages + copies\n", style="bold")
    for state, n in state_counts(snapshot.channel, zeros=False):
        text.append(f"  {visible(state):<11}{n:>8}\n")
    if not snapshot.channel:
        text.append("  none\n")
    return text


def detail_text(message: StoredMessage, now_ms: int, waiting_on: str | None = None) -> Text:
    """The detail pane: every column, the payload and the envelope, as ``pigeon show``;
    ``waiting_on``: the permission request its target waits on while handling it."""
    shown = detail(message, now_ms)
    fields = shown.fields + ([("waiting_on", waiting_on)] if waiting_on is not None else [])
    text = Text()
    for name, value in fields:
        text.append(f"{name:<{shown.name_width}}  ", style="bold")
        text.append(visible(value) + "\n")
    text.append("\npayload\n", style="bold underline")
    text.append(visible(shown.payload, multiline=True) + "\n")
    text.append("\nenvelope\n", style="bold underline")
    text.append(visible(shown.envelope, multiline=True))
    return text


def fill_table(table: DataTable[Any], columns: Sequence[str], rows: Rows) -> None:
    """Replace the rows (cells escaped), keeping the cursor on the same key (else position).

    The columns are made afresh, as wide as these cells: a DataTable's own widths
    only ever grow, and are measured late (when idle), after the first frame."""
    old_key: str | None = None
    old_row = table.cursor_row
    if table.row_count:
        try:
            old_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:
            old_key = None
    table.clear(columns=True)
    widths = column_widths(columns, [cells for _, cells in rows])
    for label, width in zip(columns, widths, strict=True):
        table.add_column(label, width=width)
    for key, cells in rows:
        table.add_row(*[Text(visible(c)) for c in cells], key=key)
    if not rows:
        return
    keys = [key for key, _ in rows]
    target_row = keys.index(old_key) if old_key in keys else min(old_row, len(rows) - 1)
    table.move_cursor(row=target_row, animate=False)
