"""The "who owes whom" view: every outstanding reply obligation, oldest first.

A modal screen over the main view, read like the rest of the TUI (a worker thread opens
its own connection, :func:`read_owed`), refreshed every ``interval`` seconds and on
``r``.  Its columns and cells are ``pigeon owed``'s
(:data:`~pigeond.cli.presentation.OWED_COLUMNS`, :func:`~pigeond.cli.presentation.owed_cells`),
every cell escaped: a payload's first line is a sender's text.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from pigeond.cli.actions import repository
from pigeond.cli.presentation import OWED_COLUMNS, owed_cells
from pigeond.owed_replies import Obligation
from pigeond.storage import StorageError
from pigeond.terminal import visible


def read_owed(path: Path | str) -> list[Obligation]:
    """Every outstanding obligation (at most the storage's listing limit)."""
    with repository(path) as repo:
        return repo.outstanding_obligations()


class OwedScreen(ModalScreen[None]):
    """Who owes whom a reply; Esc, ``o`` or ``q`` closes, ``r`` reads again."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,o,q", "close", "Close"),
        Binding("r", "reread", "Refresh"),
    ]

    def __init__(self, db: Path | str, clock: Callable[[], int], interval: float = 1.0) -> None:
        super().__init__()
        self.db = db
        self.clock = clock
        self.interval = interval
        self.obligations: list[Obligation] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="owed"):
            yield Label("who owes whom a reply", id="owed-title")
            yield DataTable(id="owed-table", cursor_type="row", zebra_stripes=True)
            yield Label("", id="owed-foot")

    def on_mount(self) -> None:
        self.query_one("#owed-table", DataTable).add_columns(*OWED_COLUMNS)
        self.action_reread()
        self.set_interval(self.interval, self.action_reread)

    @work(thread=True, exclusive=True, group="owed")
    def action_reread(self) -> None:
        try:
            obligations = read_owed(self.db)
        except StorageError as e:
            self.app.call_from_thread(self.show_error, str(e))
            return
        self.app.call_from_thread(self.show, obligations)

    def show(self, obligations: list[Obligation]) -> None:
        self.obligations = obligations
        table = self.query_one("#owed-table", DataTable)
        table.clear()
        now = self.clock()
        for obligation in obligations:
            table.add_row(*[Text(visible(cell)) for cell in owed_cells(obligation, now)])
        count = len(obligations)
        foot = "nobody owes a reply" if count == 0 else f"{count} outstanding"
        self.query_one("#owed-foot", Label).update(foot + " · Esc closes, r refreshes")

    def show_error(self, error: str) -> None:
        self.query_one("#owed-foot", Label).update(Text(visible(f"read failed: {error}")))

    def action_close(self) -> None:
        self.dismiss(None)
