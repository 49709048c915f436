"""The "waiting" view: permission requests sessions wait on while they handle swarm
messages, and the operator's answer (once, always, reject).

A modal screen over the main view, read like the rest of the TUI (a worker thread opens
its own connection), refreshed every ``interval`` seconds and on ``r``.  An answer goes
through the daemon (``POST /swarm/permissions/<id>/reply``: only it reaches opencode),
by the ``answer`` the app was given; without one (no daemon known) the screen only
lists.  Every cell is escaped: a command line is the model's text.  Its keys are declared
in :mod:`pigeond_tui.keys` with the rest.
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
from pigeond.cli.presentation import format_age
from pigeond.storage import StorageError
from pigeond.storage.permissions import PermissionRequest
from pigeond.terminal import visible
from pigeond_tui.keys import PERMISSION_KEYS, key_line

PERMISSION_COLUMNS = ("id", "session", "asks", "handling", "from", "asked")
# How an answer is given: (request id, once|always|reject) -> the line to report.
Answer = Callable[[str, str], str]


def read_permissions(path: Path | str) -> list[PermissionRequest]:
    """Every open request, oldest first."""
    with repository(path) as repo:
        return repo.open_permissions()


def permission_cells(request: PermissionRequest, now_ms: int) -> list[str]:
    return [
        request.request_id, request.session, request.subject, request.msg_id,
        request.from_session, format_age(now_ms - request.asked_at) + " ago",
    ]  # fmt: skip


class PermissionsScreen(ModalScreen[None]):
    """The open requests; a key answers the highlighted one."""

    BINDINGS: ClassVar[list[BindingType]] = list(PERMISSION_KEYS)

    def __init__(
        self, db: Path | str, clock: Callable[[], int], answer: Answer | None,
        report: Callable[[str], None], interval: float = 1.0,
    ) -> None:  # fmt: skip
        super().__init__()
        self.db = db
        self.clock = clock
        self.answer = answer
        self.report = report
        self.interval = interval
        self.requests: list[PermissionRequest] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="permissions"):
            yield Label("sessions waiting for a permission answer", id="permissions-title")
            yield DataTable(id="permissions-table", cursor_type="row", zebra_stripes=True)
            yield Label("", id="permissions-foot")

    def on_mount(self) -> None:
        self.query_one("#permissions-table", DataTable).add_columns(*PERMISSION_COLUMNS)
        self.action_reread()
        self.set_interval(self.interval, self.action_reread)

    @work(thread=True, exclusive=True, group="permissions")
    def action_reread(self) -> None:
        try:
            requests = read_permissions(self.db)
        except StorageError as e:
            self.app.call_from_thread(self.say, f"read failed: {e}")
            return
        self.app.call_from_thread(self.show, requests)

    def show(self, requests: list[PermissionRequest]) -> None:
        table = self.query_one("#permissions-table", DataTable)
        row = table.cursor_row
        self.requests = requests
        table.clear()
        now = self.clock()
        for request in requests:
            table.add_row(*[Text(visible(cell)) for cell in permission_cells(request, now)])
        if requests:
            table.move_cursor(row=min(row, len(requests) - 1))
        count = len(requests)
        self.say(("nobody waits" if count == 0 else f"{count} waiting") + "  " + self.keys)

    @property
    def keys(self) -> str:
        return key_line(self.app, PERMISSION_KEYS)

    def say(self, line: str) -> None:
        self.query_one("#permissions-foot", Label).update(Text(visible(line)))

    def highlighted(self) -> PermissionRequest | None:
        row = self.query_one("#permissions-table", DataTable).cursor_row
        return self.requests[row] if 0 <= row < len(self.requests) else None

    def action_answer(self, answer: str) -> None:
        request = self.highlighted()
        if request is None:
            self.report("permissions: no request to answer")
        elif self.answer is None:
            self.report("permissions: no daemon to answer through (pigeon permission answer)")
        else:
            self.give(request.request_id, answer)

    @work(thread=True, group="write")
    def give(self, request_id: str, answer: str) -> None:
        assert self.answer is not None
        line = self.answer(request_id, answer)
        self.app.call_from_thread(self.report, line)
        self.app.call_from_thread(self.action_reread)

    def action_close(self) -> None:
        self.dismiss(None)
