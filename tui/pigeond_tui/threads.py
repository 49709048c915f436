"""The "threads" view: every thread, the latest first, with its hops (and its own hop
limit; ``-``: the max_hops_per_thread option's), turns, messages, what a brake holds in
it, and the tokens and cost of the turns its messages caused.

A modal screen over the main view that only reads, like ``pigeon threads``: the same
read (:func:`~pigeond.storage.thread_costs.threads_with_costs`), columns and cells
(pigeond/cli/held_views.py), in a worker thread on its own connection, refreshed every
``interval`` seconds and on ``r``.  Every cell is escaped: a thread id is a sender's
choice.  Its keys are declared in :mod:`pigeond_tui.keys` with the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from pigeond.cli.actions import repository
from pigeond.cli.held_views import THREADS_COLUMNS, thread_cells
from pigeond.costs import CostTotals
from pigeond.storage import StorageError
from pigeond.storage.thread_costs import threads_with_costs
from pigeond.storage.threads import ThreadInfo
from pigeond.terminal import visible
from pigeond_tui.keys import THREAD_KEYS, key_line

Threads = list[tuple[ThreadInfo, CostTotals]]


def read_threads(path: Path | str) -> Threads:
    """The latest threads (the storage's listing limit), each with its costs."""
    with repository(path) as repo:
        return threads_with_costs(repo)


class ThreadsScreen(ModalScreen[None]):
    """The threads, the latest first."""

    BINDINGS: ClassVar[list[BindingType]] = list(THREAD_KEYS)

    def __init__(self, db: Path | str, clock: Callable[[], int], interval: float = 1.0) -> None:
        super().__init__()
        self.db = db
        self.clock = clock
        self.interval = interval

    def compose(self) -> ComposeResult:
        with Vertical(id="threads"):
            yield Label("threads, the latest first", id="threads-title")
            yield DataTable(id="threads-table", cursor_type="row", zebra_stripes=True)
            yield Label("", id="threads-foot")

    def on_mount(self) -> None:
        self.query_one("#threads-table", DataTable).add_columns(*THREADS_COLUMNS)
        self.action_reread()
        self.set_interval(self.interval, self.action_reread)

    @work(thread=True, exclusive=True, group="threads")
    def action_reread(self) -> None:
        try:
            threads = read_threads(self.db)
        except StorageError as e:
            self.app.call_from_thread(self.say, f"read failed: {e}")
            return
        self.app.call_from_thread(self.show, threads)

    def show(self, threads: Threads) -> None:
        table = self.query_one("#threads-table", DataTable)
        row = table.cursor_row
        table.clear()
        now = self.clock()
        for thread, costs in threads:
            table.add_row(*[Text(visible(cell)) for cell in thread_cells(thread, costs, now)])
        if threads:
            table.move_cursor(row=min(row, len(threads) - 1))
        count = len(threads)
        shown = "no thread yet" if count == 0 else f"{count} thread(s)"
        self.say(f"{shown}; limit -: the max_hops_per_thread option's  {self.keys}")

    @property
    def keys(self) -> str:
        return key_line(self.app, THREAD_KEYS)

    def say(self, line: str) -> None:
        self.query_one("#threads-foot", Label).update(Text(visible(line)))

    def action_close(self) -> None:
        self.dismiss(None)
