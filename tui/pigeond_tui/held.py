"""The "held" view: the messages a conversation brake holds for a person, why,
in which thread, what that thread has cost so far, and the person's decision.

A modal screen over the main view, read like the rest of the TUI (a worker thread opens
its own connection), refreshed every ``interval`` seconds and on ``r``.  Its decisions
act on the database as ``pigeon release`` and ``pigeon drop`` do
(pigeond/cli/pigeon_held.py), each one conditional transaction of the storage
(pigeond/storage/brake_holds.py), so two people deciding at once decide once: release
delivering the message and starting its brake's count over, release raising its
thread's limit by N (asked, the hop option's value or the tokens used so far filled
in), release once, and drop (asked Yes/No first: its sender is told).  Raising is not
offered for a brake that has no limit to raise: the key only says so.  Every cell is
escaped: a reason quotes a thread id, a preview is a sender's text.  Its keys are
declared in :mod:`pigeond_tui.keys` with the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

from pigeond.cli.actions import repository
from pigeond.cli.held_views import (
    HELD_COLUMNS,
    dropped_line,
    held_cells,
    released_line,
    why_not_done,
)
from pigeond.config.options import OPTION_BY_NAME
from pigeond.costs import NO_COST, CostTotals, format_totals
from pigeond.storage import StorageError
from pigeond.storage.brake_holds import RAISABLE_BRAKES, HeldMessage, HoldOutcome, ReleaseMode
from pigeond.terminal import visible
from pigeond_tui.keys import HELD_KEYS, key_line
from pigeond_tui.screens import ConfirmScreen, NumberScreen

# pigeon held's columns, with the thread's cost so far after the age.
COST_AT: Final = HELD_COLUMNS.index("age") + 1
HELD_VIEW_COLUMNS: Final = (*HELD_COLUMNS[:COST_AT], "thread cost", *HELD_COLUMNS[COST_AT:])
# How to release a message whose brake has no limit to raise, in this view's keys.
OTHER_MODES: Final = "release it with l (its count starts over) or o (once)"
# A hop hold's raise, filled in: the hop option's own default.
HOPS_RAISE: Final = int(OPTION_BY_NAME["max_hops_per_thread"].default)

Report = Callable[[str, SeverityLevel], None]


@dataclass(frozen=True, slots=True)
class HeldRow:
    """A held message and the sums of its thread's turns so far."""

    held: HeldMessage
    costs: CostTotals

    def cells(self, now_ms: int) -> list[str]:
        cells = held_cells(self.held, now_ms)
        return [*cells[:COST_AT], format_totals(self.costs), *cells[COST_AT:]]

    def raise_default(self) -> int:
        """The N filled in: the hop option's default for hops; for a budget, as many
        tokens again as the thread has used (at least 1)."""
        return HOPS_RAISE if self.held.brake == "hops" else max(self.costs.tokens, 1)


def read_held(path: Path | str) -> list[HeldRow]:
    """Every held message (the storage's listing limit), oldest first, with its thread's
    costs, in one read."""
    with repository(path) as repo:
        held = repo.held_messages()
        costs = repo.thread_costs([h.thread_id for h in held if h.thread_id is not None])
    return [HeldRow(h, costs.get(h.thread_id or "", NO_COST)) for h in held]


def release(path: Path | str, msg_id: str, mode: ReleaseMode, by: int, now_ms: int) -> str | None:
    """Release ``msg_id`` as ``pigeon release`` does: None when done, else why not."""
    with repository(path) as repo:
        done = repo.release_brake_hold(msg_id, mode, by, now_ms)
        if done.outcome is HoldOutcome.DONE:
            return None
        return why_not_done(repo, msg_id, done.outcome, OTHER_MODES)


def drop(path: Path | str, msg_id: str, now_ms: int) -> str | None:
    """Drop ``msg_id`` as ``pigeon drop`` does: None when done, else why not."""
    with repository(path) as repo:
        outcome = repo.drop_brake_hold(msg_id, now_ms)
        return None if outcome is HoldOutcome.DONE else why_not_done(repo, msg_id, outcome, "")


class HeldScreen(ModalScreen[None]):
    """The held messages; a key decides on the highlighted one."""

    BINDINGS: ClassVar[list[BindingType]] = list(HELD_KEYS)

    def __init__(
        self, db: Path | str, clock: Callable[[], int], report: Report,
        changed: Callable[[], object], interval: float = 1.0,
    ) -> None:  # fmt: skip
        """``report`` notifies the person; ``changed`` has the main view read again."""
        super().__init__()
        self.db = db
        self.clock = clock
        self.report = report
        self.changed = changed
        self.interval = interval
        self.rows: list[HeldRow] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="held"):
            yield Label("messages a conversation brake holds for a person", id="held-title")
            yield DataTable(id="held-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="held-detail")
            yield Label("", id="held-foot")

    def on_mount(self) -> None:
        self.query_one("#held-table", DataTable).add_columns(*HELD_VIEW_COLUMNS)
        self.action_reread()
        self.set_interval(self.interval, self.action_reread)

    @work(thread=True, exclusive=True, group="held")
    def action_reread(self) -> None:
        try:
            rows = read_held(self.db)
        except StorageError as e:
            self.app.call_from_thread(self.say, f"read failed: {e}")
            return
        self.app.call_from_thread(self.show, rows)

    def show(self, rows: list[HeldRow]) -> None:
        table = self.query_one("#held-table", DataTable)
        row = table.cursor_row
        self.rows = rows
        table.clear()
        now = self.clock()
        for held in rows:
            table.add_row(*[Text(visible(cell)) for cell in held.cells(now)])
        if rows:
            table.move_cursor(row=min(row, len(rows) - 1))
        self.show_detail()
        count = len(rows)
        self.say(("nothing is held" if count == 0 else f"{count} held") + "  " + self.keys)

    @on(DataTable.RowHighlighted, "#held-table")
    def show_detail(self) -> None:
        """The highlighted message's reason and payload whole (the table cuts them)."""
        row = self.highlighted()
        text = Text()
        if row is not None:
            for name, value in (("reason", row.held.reason), ("payload", row.held.preview)):
                text.append(f"{name:<8}", style="bold")
                text.append(visible(value) + "\n")
        self.query_one("#held-detail", Static).update(text)

    @property
    def keys(self) -> str:
        return key_line(self.app, HELD_KEYS)

    def say(self, line: str) -> None:
        self.query_one("#held-foot", Label).update(Text(visible(line)))

    def highlighted(self) -> HeldRow | None:
        row = self.query_one("#held-table", DataTable).cursor_row
        return self.rows[row] if 0 <= row < len(self.rows) else None

    # -- deciding ---------------------------------------------------------------------

    def action_release(self, how: str) -> None:
        row, mode = self.highlighted(), ReleaseMode(how)
        if row is None:
            self.report(f"{mode.value}: no held message highlighted", "warning")
            return
        msg_id, brake = row.held.msg_id, row.held.brake
        if mode is not ReleaseMode.RAISE:
            self.write_release(msg_id, mode, 0)
            return
        if brake not in RAISABLE_BRAKES:
            why = why_not_done(None, msg_id, HoldOutcome.NOT_RAISABLE, OTHER_MODES)
            self.report(f"raise {msg_id} ({brake}): {why}", "warning")
            return
        unit = "hops" if brake == "hops" else "tokens of budget"
        question = f"raise the limit of thread {row.held.thread_id} by how many {unit}?"

        def answered(by: int | None) -> None:
            if by is not None:
                self.write_release(msg_id, mode, by)

        self.app.push_screen(NumberScreen(question, row.raise_default()), answered)

    def action_drop(self) -> None:
        row = self.highlighted()
        if row is None:
            self.report("drop: no held message highlighted", "warning")
            return
        held = row.held
        question = (
            f"drop {held.msg_id} ({held.brake}, from {held.from_session})?"
            " Its sender is told a person dropped it."
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self.write_drop(held.msg_id)

        self.app.push_screen(ConfirmScreen(question), answered)

    @work(thread=True, group="write")
    def write_release(self, msg_id: str, mode: ReleaseMode, by: int) -> None:
        try:
            why = release(self.db, msg_id, mode, by, self.clock())
        except StorageError as e:
            why = str(e)
        line = released_line(msg_id, mode, by) if why is None else f"release {msg_id}: {why}"
        self.written(line, why is None)

    @work(thread=True, group="write")
    def write_drop(self, msg_id: str) -> None:
        try:
            why = drop(self.db, msg_id, self.clock())
        except StorageError as e:
            why = str(e)
        self.written(dropped_line(msg_id) if why is None else f"drop {msg_id}: {why}", why is None)

    def written(self, line: str, done: bool) -> None:
        """From a worker: report, then read this view and the main view again."""
        self.app.call_from_thread(self.report, line, "information" if done else "error")
        self.app.call_from_thread(self.action_reread)
        self.app.call_from_thread(self.changed)

    def action_close(self) -> None:
        self.dismiss(None)
