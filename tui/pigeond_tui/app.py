"""``pigeon-tui``: the operator's terminal UI over the same operator calls as ``pigeon``.

This module reads and draws: the overview, the state tabs, the filter, the message
table and its detail pane, and the keys that move between them or open the other
views.  The writes (requeue, retry-now, cancel) are :mod:`pigeond_tui.operator_actions`'s.
How a message looks comes from :mod:`pigeond.cli.presentation`.  Whatever comes from a
message (ids, names, payloads, errors) is drawn through ``terminal.visible`` and
as ``Text`` objects or with ``markup=False``, never as markup: a field can
neither send terminal commands nor style or link the screen.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import ClassVar, Final

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import DataTable, Footer, Header, Input, Label, Static, Tab, Tabs

from pigeond.cli.actions import NoDatabase, resolve_db
from pigeond.cli.consent_views import POLICY_COLUMN, consent_cell
from pigeond.cli.daemon_call import answer_through_daemon
from pigeond.cli.presentation import (
    FAILED_COLUMNS,
    QUEUE_COLUMNS,
    TABLE_COLUMNS,
    cut,
    failed_cells,
    last_column_width,
    message_cells,
    queue_cells,
)
from pigeond.config import SYSTEM_DB
from pigeond.credentials import DEFAULT_URL, TokenError, client_token, daemon_address
from pigeond.db_url import redacted, without_password
from pigeond.model import StoredMessage
from pigeond.storage import StorageError
from pigeond.storage.operator import open_existing
from pigeond.terminal import visible
from pigeond_tui import data
from pigeond_tui.addressing import AddressingScreen
from pigeond_tui.consent import PolicyScreen
from pigeond_tui.data import TABS, Snapshot, read_snapshot
from pigeond_tui.held import HeldScreen
from pigeond_tui.keys import KEYS, help_keys
from pigeond_tui.operator_actions import OperatorActions
from pigeond_tui.owed import OwedScreen
from pigeond_tui.permissions import Answer, PermissionsScreen
from pigeond_tui.screens import HelpScreen
from pigeond_tui.threads import ThreadsScreen
from pigeond_tui.widgets import MessageTable, Rows, counts_text, detail_text, fill_table

EXIT_USAGE = 2

# How the message table can be ordered; ``s`` cycles through them.
SORTS: dict[str, Callable[[StoredMessage], tuple[object, ...]]] = {
    "newest": lambda m: (-(m.accept_seq or 0),),
    "oldest": lambda m: (m.accept_seq or 0,),
    "target": lambda m: (m.to_session or m.channel or "", -(m.accept_seq or 0)),
    "attempts": lambda m: (-m.attempts, -(m.accept_seq or 0)),
}
# Table cells wider than this are cut (in the middle for ids and names: the detail
# pane shows them whole), so that at 200 columns every column, last_error
# included, fits beside the detail pane; last_error takes the room that is left.
CELL_WIDTHS: Final[Mapping[str, int | None]] = {"msg_id": 24, "to": 20, "from": 20, "kind": 16}
QUEUED_PANEL: Final = (*QUEUE_COLUMNS, POLICY_COLUMN)  # the target's consent beside its queue
CELL_GAP = 2  # a DataTable cell's padding, one column each side
LEAST_ERROR_WIDTH = 12


def now_ms() -> int:
    return int(time.time() * 1000)


class PigeonApp(OperatorActions):
    """Overview on top, the message table with its detail pane below."""

    CSS_PATH = "pigeon.tcss"
    TITLE = "pigeon-tui"
    BINDINGS: ClassVar[list[BindingType]] = list(KEYS)

    def __init__(
        self, db: Path | str, *, clock: Callable[[], int] = now_ms, interval: float = 1.0,
        health: Callable[[], str | None] | None = None, answer_permission: Answer | None = None,
    ) -> None:  # fmt: skip
        """``health``: the daemon's word on opencode (:func:`data.health_line`) for the header;
        ``answer_permission`` answers a permission request through the daemon (None: the
        waiting view only lists)."""
        super().__init__()
        self.health = health
        self.answer_permission = answer_permission
        self.db = db
        self.clock = clock
        self.interval = interval
        self.state_tab = "queued"
        self.filter_text = ""
        self.sort = "newest"
        self.page = 0
        self.messages: dict[str, StoredMessage] = {}
        self.reports: list[str] = []  # every notification shown, for the record (and tests)
        self.snapshot: Snapshot | None = None
        self.shown_width = -1  # the message table's width when it was last filled

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="overview"):
            yield Static(id="counts")
            with Vertical(classes="panel"):
                yield Label("queued per target", classes="panel-title")
                yield DataTable(id="queued", cursor_type="row", zebra_stripes=True)
            with Vertical(classes="panel"):
                yield Label("failed per target", classes="panel-title")
                yield DataTable(id="failed", cursor_type="row", zebra_stripes=True)
        yield Tabs(*[Tab(name, id=name) for name in TABS], id="states")
        yield Input(placeholder="filter: target, sender, kind or text", id="filter")
        with Horizontal(id="body"):
            yield MessageTable(self.refuse_key, id="messages")
            with VerticalScroll(id="detail-scroll"):
                yield Static(id="detail")
        yield Footer()

    @property
    def db_name(self) -> str:
        """The database as the header names it: a URL never with its password."""
        return visible(redacted(self.db))

    def on_mount(self) -> None:
        self.sub_title = self.db_name
        self.main_view.query_one("#queued", DataTable).add_columns(*QUEUED_PANEL)
        self.main_view.query_one("#failed", DataTable).add_columns(*FAILED_COLUMNS)
        self.main_view.query_one("#messages", DataTable).add_columns(*TABLE_COLUMNS)
        self.main_view.query_one("#filter", Input).display = False
        self.main_view.query_one("#messages", DataTable).focus()
        self.refresh_data()
        self.set_interval(self.interval, self.refresh_data)

    # -- reading ----------------------------------------------------------------

    @work(thread=True, exclusive=True, group="read")
    def refresh_data(self) -> None:
        """Read one snapshot in a worker thread, then show it on the UI thread."""
        try:
            snapshot = read_snapshot(
                self.db, TABS[self.state_tab], self.filter_text, self.page, self.clock()
            )
        except StorageError as e:
            self.call_from_thread(self.report, f"read failed: {e}", "error")
            return
        self.call_from_thread(self.show_snapshot, snapshot)
        if self.health is not None:
            self.call_from_thread(self.show_health, self.health())

    def show_health(self, problem: str | None) -> None:
        """The daemon's word on opencode (e.g. an API it does not speak) in the header."""
        self.sub_title = self.db_name if problem is None else f"{self.db_name} · {visible(problem)}"

    def show_snapshot(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        now = self.clock()
        self.main_view.query_one("#counts", Static).update(counts_text(snapshot))
        queued = [
            (q.target, [*queue_cells(q, now), consent_cell(snapshot.consent, q.target)])
            for q in snapshot.queued
        ]
        self.fill("#queued", QUEUED_PANEL, queued)
        self.fill("#failed", FAILED_COLUMNS, [(f.target, failed_cells(f)) for f in snapshot.failed])
        self.messages = {m.msg_id: m for m in snapshot.messages}
        self.show_messages()

    def show_messages(self) -> None:
        """The message table in the chosen order, last_error fitted to the room left."""
        now = self.clock()
        rows = [
            (m.msg_id, message_cells(m, now, TABLE_COLUMNS, CELL_WIDTHS))
            for m in sorted(self.messages.values(), key=SORTS[self.sort])
        ]
        table = self.main_view.query_one("#messages", DataTable)
        self.shown_width = table.size.width
        room = last_column_width(
            TABLE_COLUMNS, [cells for _, cells in rows],
            table.size.width - table.styles.scrollbar_size_vertical,
            gap=CELL_GAP, least=LEAST_ERROR_WIDTH,
        )  # fmt: skip
        fitted = [(key, [*cells[:-1], cut(cells[-1], room)]) for key, cells in rows]
        self.fill("#messages", TABLE_COLUMNS, fitted)
        self.show_detail()
        self.refresh_bindings()

    @on(MessageTable.Resized)
    def table_resized(self) -> None:
        """last_error takes the room left beside the other columns: measure it again
        (unless the app is closing and its widgets are going).  Only a new width changes
        that room, and refilling 500 rows is most of what the first screen costs, so a
        resize that keeps the width (a scrollbar appearing, a new height) refills nothing."""
        if self.snapshot is not None:
            with suppress(NoMatches):
                if self.main_view.query_one("#messages", DataTable).size.width != self.shown_width:
                    self.show_messages()

    def fill(self, selector: str, columns: Sequence[str], rows: Rows) -> None:
        fill_table(self.main_view.query_one(selector, DataTable), columns, rows)

    def show_detail(self) -> None:
        message = self.highlighted()
        pane = self.main_view.query_one("#detail", Static)
        if message is None:
            pane.update(Text("no message selected"))
            return
        waiting = None if self.snapshot is None else self.snapshot.waiting.get(message.msg_id)
        pane.update(detail_text(message, self.clock(), waiting))

    @on(DataTable.RowHighlighted, "#messages")
    def row_highlighted(self) -> None:
        with suppress(NoMatches):  # a highlight that lands while the app closes
            self.show_detail()
            self.refresh_bindings()

    # -- navigation -------------------------------------------------------------

    def action_refresh(self) -> None:
        self.refresh_data()

    @on(OperatorActions.Written)
    def written_through(self) -> None:
        """A write finished: show the database as it is now."""
        self.refresh_data()

    def action_page(self, step: int) -> None:
        """Move the message window; an empty next page is not entered."""
        if step > 0 and len(self.messages) < data.WINDOW:
            self.report("no further messages", "warning")
            return
        self.page = max(self.page + step, 0)
        self.report(f"page {self.page + 1}")
        self.refresh_data()

    def action_sort(self) -> None:
        names = list(SORTS)
        self.sort = names[(names.index(self.sort) + 1) % len(names)]
        self.report(f"sorted by {self.sort}")
        self.show_messages()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(help_keys(self)))

    def action_owed(self) -> None:
        self.push_screen(OwedScreen(self.db, self.clock, self.interval))

    def action_channels(self) -> None:
        """The names sessions hold and the channels' members (pigeond_tui/addressing.py)."""
        self.push_screen(AddressingScreen(self.db, self.clock, self.interval))

    def action_permissions(self) -> None:
        """Sessions waiting for a permission answer (pigeond_tui/permissions.py)."""
        screen = PermissionsScreen(
            self.db, self.clock, self.answer_permission, self.reported, self.interval
        )
        self.push_screen(screen)

    def action_held(self) -> None:
        """What the conversation brakes hold, and the person's decision (pigeond_tui/held.py)."""
        self.push_screen(
            HeldScreen(self.db, self.clock, self.report, self.refresh_data, self.interval)
        )

    def action_threads(self) -> None:
        """The threads with their hops, turns and costs (pigeond_tui/threads.py)."""
        self.push_screen(ThreadsScreen(self.db, self.clock, self.interval))

    def action_policy(self) -> None:
        """The highlighted row's target's consent (pigeond_tui/consent.py)."""
        message = self.highlighted()
        if message is None or message.to_session is None:
            self.report("policy: highlight a direct message to choose its target", "warning")
            return
        self.push_screen(PolicyScreen(self.db, message.to_session, self.clock, self.reported))

    def reported(self, line: str) -> None:
        self.report(line, "information")
        self.refresh_data()

    def action_state(self, tab: str) -> None:
        self.main_view.query_one("#states", Tabs).active = tab

    @on(Tabs.TabActivated, "#states")
    def state_changed(self, event: Tabs.TabActivated) -> None:
        if event.tab.id and event.tab.id != self.state_tab:
            self.state_tab = event.tab.id
            self.page = 0
            self.refresh_data()

    def action_filter(self) -> None:
        box = self.main_view.query_one("#filter", Input)
        box.display = True
        box.focus()

    @on(Input.Submitted, "#filter")
    def filter_submitted(self, event: Input.Submitted) -> None:
        self.filter_text = event.value.strip()
        self.page = 0
        if not self.filter_text:
            event.input.display = False
        self.main_view.query_one("#messages", DataTable).focus()
        self.refresh_data()

    def action_clear_filter(self) -> None:
        box = self.main_view.query_one("#filter", Input)
        box.value = ""
        box.display = False
        self.main_view.query_one("#messages", DataTable).focus()
        if self.filter_text:
            self.filter_text = ""
            self.page = 0
            self.refresh_data()


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    system_db: str = SYSTEM_DB,
) -> int:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog="pigeon-tui", description="pigeond operator TUI")
    parser.add_argument(
        "--db", metavar="PATH|URL",
        help="a database file or a postgresql:// URL (default as for pigeon); never with its"
        " password",
    )  # fmt: skip
    parser.add_argument(
        "--db-password-file", metavar="FILE",
        help="the PostgreSQL password's file (as for pigeon)",
    )  # fmt: skip
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:
        return EXIT_USAGE if e.code else 0
    try:
        path = resolve_db(args.db, env, system_db=system_db, password_file=args.db_password_file)
    except NoDatabase as e:
        print(f"pigeon-tui: {visible(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    try:
        open_existing(path).close()
    except StorageError as e:  # missing, foreign, another schema; PostgreSQL out of reach
        print(f"pigeon-tui: {visible(without_password(str(e), path))}", file=sys.stderr)
        return EXIT_USAGE
    daemon = daemon_address(None, env, default_url=DEFAULT_URL).url
    try:
        token = client_token(env)
    except TokenError:
        token = None  # over TCP the answer is then refused, and says so
    answer = functools.partial(answer_through_daemon, daemon, token)
    PigeonApp(
        path, health=functools.partial(data.health_line, daemon), answer_permission=answer
    ).run()
    return 0
