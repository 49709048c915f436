"""The TUI's "who owes whom" view: ``o`` opens it over the main view, Esc closes it."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import DataTable

from pigeond.cli.presentation import OWED_COLUMNS
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.repository import Accept
from pigeond_tui.app import PigeonApp
from pigeond_tui.owed import OwedScreen
from testkit.messages import new_message
from tests.hostile_text import EVIL, EVIL_SHOWN
from tests.tui_support import NOW, drive, settle


def seed_owed(path: Path) -> Path:
    """ses_w owes ses_a a reply, handed off, its first line hostile; a plain chat owes none."""
    repo = SwarmRepository(open_database(path))
    ask = new_message("ses_w", msg_id="msg_ask", sender="ses_a", payload="Review " + EVIL)
    repo.accept_many([Accept(ask, NOW, reply_within_ms=120_000)])
    repo.mark_handed_off_many(["msg_ask"], NOW)
    repo.accept_many([Accept(new_message("ses_w", msg_id="msg_chat"), NOW)])
    repo.close()
    return path


def owed_rows(app: PigeonApp) -> list[list[str]]:
    table = app.screen.query_one("#owed-table", DataTable)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


def test_o_shows_who_owes_whom_and_escape_closes_it(tmp_path: Path) -> None:
    """One row per outstanding obligation, in pigeon owed's columns, its text escaped."""
    db = seed_owed(tmp_path / "owed.db")
    seen: dict[str, object] = {}

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("o")
        await settle(app, pilot)
        seen["screen"] = type(app.screen)
        table = app.screen.query_one("#owed-table", DataTable)
        seen["columns"] = [str(c.label) for c in table.columns.values()]
        seen["rows"] = owed_rows(app)
        await pilot.press("escape")
        await settle(app, pilot)
        seen["after"] = type(app.screen)

    drive(db, script)
    assert seen["screen"] is OwedScreen
    assert seen["columns"] == list(OWED_COLUMNS)
    rows = seen["rows"]
    assert isinstance(rows, list) and len(rows) == 1
    row = rows[0]
    assert row[:5] == ["ses_w", "msg_ask", "ses_a", "chat", "open"]
    assert row[-1] == "Review " + EVIL_SHOWN
    assert seen["after"] is not OwedScreen


def test_the_owed_view_says_when_nobody_owes_anything(tmp_path: Path) -> None:
    """An empty list says so rather than showing an empty table alone."""
    db = tmp_path / "empty.db"
    SwarmRepository(open_database(db)).close()
    foot: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("o")
        await settle(app, pilot)
        foot.append(str(app.screen.query_one("#owed-foot").render()))

    drive(db, script)
    assert foot[0].startswith("nobody owes a reply")


def test_a_refresh_while_the_owed_view_is_open_fills_the_main_view(tmp_path: Path) -> None:
    """A refresh that lands while a modal screen is on top fills the main view's widgets
    (a query of the top screen found nothing there and failed the worker)."""
    db = seed_owed(tmp_path / "owed.db")
    rows: list[int] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("o")
        await settle(app, pilot)
        repo = SwarmRepository(open_database(db))
        repo.accept_many([Accept(new_message("ses_new", msg_id="msg_new"), NOW)])
        repo.close()
        app.refresh_data()
        await settle(app, pilot)
        assert isinstance(app.screen, OwedScreen)
        rows.append(app.main_view.query_one("#queued", DataTable).row_count)

    drive(db, script)
    assert rows == [2]  # ses_w (msg_chat) and now ses_new
