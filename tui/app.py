"""``pigeon-tui``: the operator's terminal UI over the same storage calls as ``pigeon``.

Whatever comes from a message (ids, names, payloads, errors) is drawn through
``terminal.visible`` and as ``Text`` objects or with ``markup=False``, never as
markup: a field can neither send terminal commands nor style or link the screen.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Footer, Header, Input, Label, Static, Tab, Tabs

from pigeond.cli.pigeon import destination, format_age, format_time, resolve_db
from pigeond.envelope import render_envelope
from pigeond.model import StoredMessage
from pigeond.storage import SchemaError, StorageError
from pigeond.storage.operator import ActionOutcome, open_existing
from pigeond.terminal import visible
from tui import data
from tui.data import STATES, Snapshot, act_many, act_one, act_target, read_snapshot

EXIT_USAGE = 2

BINDINGS_HELP: tuple[tuple[str, str], ...] = (
    ("?", "this help"),
    ("q", "quit"),
    ("r", "refresh now (it also refreshes every second)"),
    ("/", "filter by target, sender, kind or text (Enter applies, Esc clears)"),
    ("1 … 6", "show queued / failed / delivered / expired / cancelled / all"),
    ("↑ ↓", "move in the table; the detail pane follows"),
    ("u", "requeue the highlighted message (failed or expired)"),
    ("n", "retry the highlighted queued message now"),
    ("x", "cancel the highlighted queued message"),
    ("U", "requeue every failed/expired message to the highlighted row's target"),
    ("X", "cancel every queued message to the highlighted row's target"),
    ("s", "sort by: newest, oldest, target, attempts (cycles)"),
    ("] / [", "next / previous window of 500 messages (tables never load everything)"),
    ("R", "requeue every failed/expired message the table lists now (state tab + filter)"),
    ("C", "cancel every queued message the table lists now (state tab + filter)"),
)

# How the message table can be ordered; ``s`` cycles through them.
SORTS: dict[str, Callable[[StoredMessage], tuple[object, ...]]] = {
    "newest": lambda m: (-(m.accept_seq or 0),),
    "oldest": lambda m: (m.accept_seq or 0,),
    "target": lambda m: (m.to_session or m.channel or "", -(m.accept_seq or 0)),
    "attempts": lambda m: (-m.attempts, -(m.accept_seq or 0)),
}

MESSAGE_COLUMNS = ("msg_id", "state", "to", "from", "kind", "attempts", "age", "last_error")


def now_ms() -> int:
    return int(time.time() * 1000)


class ConfirmScreen(ModalScreen[bool]):
    """A Yes/No question; ``y``/``n``/Esc work as well as the buttons."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Grid(id="confirm"):
            yield Label(Text(visible(self.question)), id="question")
            yield Button("Yes (y)", variant="error", id="yes")
            yield Button("No (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "close", "Close"),
    ]

    def compose(self) -> ComposeResult:
        lines = [f"{key:>7}  {what}" for key, what in BINDINGS_HELP]
        with Vertical(id="help"):
            yield Label("pigeon-tui keys", id="help-title")
            yield Static(Text("\n".join(lines)), id="help-body")
            yield Label("Esc or ? closes", id="help-foot")

    def action_close(self) -> None:
        self.dismiss(None)


def describe(message: StoredMessage) -> Text:
    """Every column, readable times, the payload and the envelope, escaped for the terminal."""
    fields: list[tuple[str, object]] = [
        ("msg_id", message.msg_id),
        ("state", message.state),
        ("from", message.from_session),
        ("to", message.to_session or "-"),
        ("channel", message.channel or "-"),
        ("kind", message.kind),
        ("priority", message.priority),
        ("reply_to", message.reply_to or "-"),
        ("attempts", message.attempts),
        ("requeue_count", message.requeue_count),
        ("last_error", message.last_error or "-"),
        ("created_at", format_time(message.created_at)),
        ("updated_at", format_time(message.updated_at)),
        ("next_retry_at", format_time(message.next_retry_at)),
        ("handed_off_at", format_time(message.handed_off_at)),
        ("verify_by", format_time(message.verify_by)),
        ("verified_at", format_time(message.verified_at)),
        ("expires_at", format_time(message.expires_at)),
        ("accept_seq", message.accept_seq if message.accept_seq is not None else "-"),
        ("handoff_seq", message.handoff_seq if message.handoff_seq is not None else "-"),
    ]
    text = Text()
    for name, value in fields:
        text.append(f"{name:>14} ", style="bold")
        text.append(visible(str(value)) + "\n")
    text.append("\npayload\n", style="bold underline")
    text.append(visible(message.payload, multiline=True) + "\n")
    text.append("\nenvelope\n", style="bold underline")
    text.append(visible(render_envelope(message), multiline=True))
    return text


def counts_text(snapshot: Snapshot) -> Text:
    text = Text()
    text.append("direct messages\n", style="bold")
    for state in ("queued", "handed_off", "failed", "expired", "cancelled"):
        text.append(f"  {state:<11}{snapshot.direct.get(state, 0):>8}\n")
    text.append("channel messages\n", style="bold")
    for state in ("queued", "handed_off", "failed", "expired", "cancelled"):
        n = snapshot.channel.get(state, 0)
        if n:
            text.append(f"  {state:<11}{n:>8}\n")
    if not snapshot.channel:
        text.append("  none\n")
    return text


class PigeonApp(App[None]):
    """Overview on top, the message table with its detail pane below."""

    CSS_PATH = "pigeon.tcss"
    TITLE = "pigeon-tui"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("r", "refresh", "Refresh"),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("u", "one('requeue')", "Requeue"),
        Binding("n", "one('retry-now')", "Retry now"),
        Binding("x", "one('cancel')", "Cancel"),
        Binding("U", "target('requeue')", "Requeue target"),
        Binding("X", "target('cancel')", "Cancel target"),
        Binding("s", "sort", "Sort"),
        Binding("right_square_bracket", "page(1)", "Next page", show=False),
        Binding("left_square_bracket", "page(-1)", "Previous page", show=False),
        Binding("R", "listed('requeue')", "Requeue listed", show=False),
        Binding("C", "listed('cancel')", "Cancel listed", show=False),
        *[Binding(str(i + 1), f"state('{tab}')", tab, show=False) for i, tab in enumerate(STATES)],
    ]

    def __init__(
        self, db: Path | str, *, clock: Callable[[], int] = now_ms, interval: float = 1.0
    ) -> None:
        super().__init__()
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
        yield Tabs(*[Tab(name, id=name) for name in STATES], id="states")
        yield Input(placeholder="filter: target, sender, kind or text", id="filter")
        with Horizontal(id="body"):
            yield DataTable(id="messages", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="detail-scroll"):
                yield Static(id="detail")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = str(self.db)
        self.query_one("#queued", DataTable).add_columns("target", "queued", "oldest", "next retry")
        self.query_one("#failed", DataTable).add_columns("target", "failed", "latest error")
        self.query_one("#messages", DataTable).add_columns(*MESSAGE_COLUMNS)
        self.query_one("#filter", Input).display = False
        self.query_one("#messages", DataTable).focus()
        self.refresh_data()
        self.set_interval(self.interval, self.refresh_data)

    # -- reading ----------------------------------------------------------------

    @work(thread=True, exclusive=True, group="read")
    def refresh_data(self) -> None:
        """Read one snapshot in a worker thread, then show it on the UI thread."""
        try:
            snapshot = read_snapshot(self.db, STATES[self.state_tab], self.filter_text, self.page)
        except StorageError as e:
            self.call_from_thread(self.report, f"read failed: {e}", "error")
            return
        self.call_from_thread(self.show_snapshot, snapshot)

    def show_snapshot(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        now = self.clock()
        self.query_one("#counts", Static).update(counts_text(snapshot))
        self.fill(
            self.query_one("#queued", DataTable),
            [
                (q.target, (q.target, str(q.queued), format_age(now - q.oldest_created_at),
                 "now" if q.next_retry_at is None or q.next_retry_at <= now
                 else "in " + format_age(q.next_retry_at - now)))
                for q in snapshot.queued
            ],
        )  # fmt: skip
        self.fill(
            self.query_one("#failed", DataTable),
            [(f.target, (f.target, str(f.failed), f.latest_error or "")) for f in snapshot.failed],
        )
        self.messages = {m.msg_id: m for m in snapshot.messages}
        self.fill(
            self.query_one("#messages", DataTable),
            [
                (m.msg_id, (m.msg_id, m.state, destination(m), m.from_session, m.kind,
                 str(m.attempts), format_age(now - m.created_at), (m.last_error or "")[:60]))
                for m in sorted(snapshot.messages, key=SORTS[self.sort])
            ],
        )  # fmt: skip
        self.show_detail()

    def fill(self, table: DataTable[Text], rows: Sequence[tuple[str, tuple[str, ...]]]) -> None:
        """Replace the rows (cells escaped), keeping the cursor on the same key (else position)."""
        old_key: str | None = None
        old_row = table.cursor_row
        if table.row_count:
            try:
                old_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            except Exception:
                old_key = None
        table.clear()
        for key, cells in rows:
            table.add_row(*[Text(visible(c)) for c in cells], key=key)
        if not rows:
            return
        keys = [key for key, _ in rows]
        target_row = keys.index(old_key) if old_key in keys else min(old_row, len(rows) - 1)
        table.move_cursor(row=target_row, animate=False)

    def highlighted(self) -> StoredMessage | None:
        table = self.query_one("#messages", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return None if key is None else self.messages.get(key)

    def show_detail(self) -> None:
        message = self.highlighted()
        detail = self.query_one("#detail", Static)
        detail.update(describe(message) if message else Text("no message selected"))

    @on(DataTable.RowHighlighted, "#messages")
    def row_highlighted(self) -> None:
        self.show_detail()

    # -- navigation -------------------------------------------------------------

    def action_refresh(self) -> None:
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
        if self.snapshot is not None:
            self.show_snapshot(self.snapshot)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_state(self, tab: str) -> None:
        self.query_one("#states", Tabs).active = tab

    @on(Tabs.TabActivated, "#states")
    def state_changed(self, event: Tabs.TabActivated) -> None:
        if event.tab.id and event.tab.id != self.state_tab:
            self.state_tab = event.tab.id
            self.page = 0
            self.refresh_data()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    @on(Input.Submitted, "#filter")
    def filter_submitted(self, event: Input.Submitted) -> None:
        self.filter_text = event.value.strip()
        self.page = 0
        if not self.filter_text:
            event.input.display = False
        self.query_one("#messages", DataTable).focus()
        self.refresh_data()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.display = False
        self.query_one("#messages", DataTable).focus()
        if self.filter_text:
            self.filter_text = ""
            self.page = 0
            self.refresh_data()

    # -- changing ---------------------------------------------------------------

    def report(self, text: str, severity: str = "information") -> None:
        """Notify (escaped, no markup: the text may carry ids and errors) and keep a record."""
        shown = visible(text)
        self.reports.append(shown)
        self.notify(shown, severity="error" if severity == "error" else "information", markup=False)

    def action_one(self, action: str) -> None:
        message = self.highlighted()
        if message is None:
            self.report("no message highlighted", "error")
            return
        seen = message.updated_at  # the row as the operator saw it
        question = f"{action} {message.msg_id} ({message.state}, to {destination(message)})?"

        def answered(yes: bool | None) -> None:
            if yes:
                self.write_one(action, message.msg_id, seen)

        self.push_screen(ConfirmScreen(question), answered)

    def action_target(self, action: str) -> None:
        message = self.highlighted()
        if message is None or message.to_session is None:
            self.report("highlight a direct message to choose its target", "error")
            return
        target = message.to_session
        which = "failed/expired" if action == "requeue" else "queued"
        question = f"{action} every {which} message to {target}?"

        def answered(yes: bool | None) -> None:
            if yes:
                self.write_target(action, target)

        self.push_screen(ConfirmScreen(question), answered)

    def action_listed(self, action: str) -> None:
        """The bulk form for the current view: every listed row the action applies to."""
        states = ("failed", "expired") if action == "requeue" else ("queued",)
        seen = [(m.msg_id, m.updated_at) for m in self.messages.values() if m.state in states]
        if not seen:
            self.report(f"no listed message can be {action}d", "error")
            return
        question = f"{action} the {len(seen)} {'/'.join(states)} message(s) listed?"

        def answered(yes: bool | None) -> None:
            if yes:
                self.write_many(action, seen)

        self.push_screen(ConfirmScreen(question), answered)

    @work(thread=True, group="write")
    def write_many(self, action: str, seen: list[tuple[str, int]]) -> None:
        try:
            outcomes = act_many(self.db, action, seen, self.clock())
        except StorageError as e:
            self.call_from_thread(self.report, f"{action}: {e}", "error")
            return
        done = outcomes.get(ActionOutcome.CHANGED, 0)
        text = f"{action}: {done} of {len(seen)} done"
        if done < len(seen):
            text += f", {len(seen) - done} changed meanwhile or no longer applicable"
        self.call_from_thread(self.report, text, "information" if done else "error")
        self.call_from_thread(self.refresh_data)

    @work(thread=True, group="write")
    def write_one(self, action: str, msg_id: str, seen: int) -> None:
        try:
            outcome = act_one(self.db, action, msg_id, seen, self.clock())
        except StorageError as e:
            self.call_from_thread(self.report, f"{action} {msg_id}: {e}", "error")
            return
        if outcome is ActionOutcome.CHANGED:
            text, severity = f"{msg_id}: {action} done", "information"
        elif outcome is ActionOutcome.STALE:
            text, severity = f"{msg_id}: changed meanwhile, nothing done", "error"
        else:
            text, severity = f"{msg_id}: {outcome.value}, nothing done", "error"
        self.call_from_thread(self.report, text, severity)
        self.call_from_thread(self.refresh_data)

    @work(thread=True, group="write")
    def write_target(self, action: str, target: str) -> None:
        try:
            changed = act_target(self.db, action, target, self.clock())
        except StorageError as e:
            self.call_from_thread(self.report, f"{action} {target}: {e}", "error")
            return
        self.call_from_thread(self.report, f"{action} {target}: {len(changed)} message(s)")
        self.call_from_thread(self.refresh_data)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog="pigeon-tui", description="pigeond operator TUI")
    parser.add_argument("--db", help="the database (default as for pigeon)")
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:
        return EXIT_USAGE if e.code else 0
    path = resolve_db(args.db, env)
    try:
        open_existing(path).close()
    except SchemaError as e:
        print(f"pigeon-tui: {e}", file=sys.stderr)
        return EXIT_USAGE
    PigeonApp(path).run()
    return 0
