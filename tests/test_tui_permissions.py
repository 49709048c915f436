"""The TUI's "waiting" view: ``w`` lists the permission requests sessions wait on while
they handle swarm messages; ``o``, ``a`` and ``x`` answer the highlighted one (once,
always, reject) through the daemon; Esc closes it."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import DataTable

from pigeond.storage import SwarmRepository, open_database
from pigeond_tui.app import PigeonApp
from pigeond_tui.permissions import PERMISSION_COLUMNS, PermissionsScreen
from testkit.messages import new_message
from tests.hostile_text import EVIL, EVIL_SHOWN
from tests.permission_helpers import SENDER, SESSION, permission_request
from tests.tui_support import LATER, drive, settle, table_rows


def seed(path: Path) -> Path:
    """Two open requests: an old one whose command is hostile, and a newer one."""
    repo = SwarmRepository(open_database(path))
    repo.record_permission(
        permission_request("per_old", command="rm " + EVIL, asked_at=LATER - 120_000)
    )
    repo.record_permission(permission_request("per_new", msg_id="msg_two", asked_at=LATER - 1_000))
    repo.close()
    return path


class Daemon:
    """Stands for the daemon: records each answer, and takes the request off the list as
    the real one does."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.answers: list[tuple[str, str]] = []

    def __call__(self, request_id: str, answer: str) -> str:
        self.answers.append((request_id, answer))
        repo = SwarmRepository(open_database(self.db))
        repo.close_permission(request_id)
        repo.close()
        return f"{request_id}: answered {answer}"


def test_w_lists_who_waits_on_what_while_handling_which_message(tmp_path: Path) -> None:
    """One row per request, oldest first: id, session, what it asks, message, sender, age;
    the model's command escaped."""
    db = seed(tmp_path / "p.db")
    seen: dict[str, object] = {}

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("w")
        await settle(app, pilot)
        seen["screen"] = type(app.screen)
        table = app.screen.query_one("#permissions-table", DataTable)
        seen["columns"] = [str(c.label) for c in table.columns.values()]
        seen["rows"] = table_rows(app, "#permissions-table")
        await pilot.press("escape")
        await settle(app, pilot)
        seen["after"] = type(app.screen)

    drive(db, script)
    assert seen["screen"] is PermissionsScreen and seen["after"] is not PermissionsScreen
    assert seen["columns"] == list(PERMISSION_COLUMNS)
    assert seen["rows"] == [
        ["per_old", SESSION, f"bash `rm {EVIL_SHOWN}`", "msg_handled", SENDER, "2m ago"],
        ["per_new", SESSION, "bash `rm -rf build`", "msg_two", SENDER, "1s ago"],
    ]


def test_each_answer_key_answers_the_highlighted_request(tmp_path: Path) -> None:
    """o once on the first row, then a always on what is highlighted next; each leaves."""
    db = seed(tmp_path / "p.db")
    daemon = Daemon(db)
    left: list[list[list[str]]] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("w")
        await settle(app, pilot)
        await pilot.press("o")
        await settle(app, pilot)
        left.append(table_rows(app, "#permissions-table"))
        await pilot.press("a")
        await settle(app, pilot)
        left.append(table_rows(app, "#permissions-table"))

    app = drive(db, script, answer_permission=daemon)
    assert daemon.answers == [("per_old", "once"), ("per_new", "always")]
    assert [[r[0] for r in table] for table in left] == [["per_new"], []]
    assert "per_old: answered once" in app.reports


def test_x_rejects(tmp_path: Path) -> None:
    """x answers reject."""
    db = seed(tmp_path / "p.db")
    daemon = Daemon(db)

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("w")
        await settle(app, pilot)
        await pilot.press("x")
        await settle(app, pilot)

    drive(db, script, answer_permission=daemon)
    assert daemon.answers == [("per_old", "reject")]


def test_without_a_daemon_the_view_only_lists(tmp_path: Path) -> None:
    """No daemon to answer through: the key says so, and nothing changes."""
    db = seed(tmp_path / "p.db")
    after: list[list[list[str]]] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("w")
        await settle(app, pilot)
        await pilot.press("o")
        await settle(app, pilot)
        after.append(table_rows(app, "#permissions-table"))

    app = drive(db, script)
    assert len(after[0]) == 2
    assert any("no daemon to answer through" in line for line in app.reports)


def test_the_view_says_when_nobody_waits(tmp_path: Path) -> None:
    """An empty list says so."""
    db = tmp_path / "empty.db"
    SwarmRepository(open_database(db)).close()
    foot: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("w")
        await settle(app, pilot)
        foot.append(str(app.screen.query_one("#permissions-foot").render()))

    drive(db, script)
    assert foot[0].startswith("nobody waits")


def test_the_detail_pane_says_what_the_message_s_target_waits_on(tmp_path: Path) -> None:
    """The highlighted message being handled: a waiting_on line naming the request."""
    db = tmp_path / "p.db"
    repo = SwarmRepository(open_database(db))
    repo.accept(new_message(SESSION, msg_id="msg_handled", sender=SENDER), LATER - 5_000)
    repo.mark_handed_off("msg_handled", LATER - 4_000)
    repo.record_permission(permission_request(asked_at=LATER - 1_000))
    repo.close()
    detail: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("3")  # the delivered tab
        await settle(app, pilot)
        detail.append(str(app.query_one("#detail").render()))

    drive(db, script)
    assert "waiting_on" in detail[0] and "bash `rm -rf build` (per_one)" in detail[0]
