"""The TUI's "threads" view: ``t`` lists the threads the latest first, with ``pigeon
threads``' columns (hops, limit, turns, messages, held, tokens, cost); Esc closes it."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import DataTable

from pigeond.cli.held_views import THREADS_COLUMNS
from pigeond.costs import EndedTurn, TurnUsage
from pigeond.model import Hold
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.repository import Accept
from pigeond_tui.app import PigeonApp
from pigeond_tui.threads import ThreadsScreen
from testkit.messages import new_message
from tests.hostile_text import EVIL, EVIL_SHOWN, raw_controls
from tests.storage_helpers import seen_message
from tests.tui_support import NOW, drive, settle, table_rows

USAGE = TurnUsage(input=50_000, output=2_310, cost=0.25)
EVIL_THREAD = "thr_[b]e[/b]" + EVIL


def seed(path: Path) -> Path:
    """thr_old (a minute before the others) caused one turn of 52,310 tokens and $0.25;
    thr_new has one message sent and one a brake holds; the hostile thread is the latest."""
    repo = SwarmRepository(open_database(path))
    seen_message(repo, "msg_paid", NOW - 60_000, thread="thr_old")
    repo.record_turns("ses_target", [EndedTurn("u1", ("msg_paid",), USAGE)], NOW - 60_000)
    for msg_id, hold in (("msg_a", None), ("msg_b", Hold("hops", "too many hops"))):
        message = new_message("ses_b", msg_id=msg_id, sender="ses_a")
        repo.accept_many([Accept(message, NOW, thread_id="thr_new", brake_hold=hold)])
    evil = new_message("ses_b", msg_id="msg_evil", sender="ses_a")
    repo.accept_many([Accept(evil, NOW + 1, thread_id=EVIL_THREAD)])
    repo.close()
    return path


def test_t_lists_threads_the_latest_first_with_tokens_and_cost(tmp_path: Path) -> None:
    """The latest first, each with hops, limit, turns, messages, held, tokens, cost and
    age; Esc closes."""
    db = seed(tmp_path / "p.db")
    seen: dict[str, object] = {}

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("t")
        await settle(app, pilot)
        seen["screen"] = type(app.screen)
        table = app.screen.query_one("#threads-table", DataTable)
        seen["columns"] = [str(c.label) for c in table.columns.values()]
        seen["rows"] = table_rows(app, "#threads-table")
        await pilot.press("escape")
        await settle(app, pilot)
        seen["after"] = type(app.screen)

    drive(db, script)
    assert seen["screen"] is ThreadsScreen and seen["after"] is not ThreadsScreen
    assert seen["columns"] == list(THREADS_COLUMNS)
    assert seen["rows"] == [
        ["thr_[b]e[/b]" + EVIL_SHOWN, "1", "-", "0", "1", "0", "0", "$0.0000", "1m"],
        ["thr_new", "1", "-", "0", "2", "1", "0", "$0.0000", "1m"],
        ["thr_old", "1", "-", "1", "1", "0", "52,310", "$0.2500", "2m"],
    ]


def test_hostile_thread_ids_are_shown_as_data(tmp_path: Path) -> None:
    """A thread id with escapes, a bidi override and markup: no raw control character
    reaches the screen, and the markup shows as written."""
    db = seed(tmp_path / "p.db")
    shown: list[list[str]] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("t")
        await settle(app, pilot)
        shown.extend(table_rows(app, "#threads-table"))

    drive(db, script)
    assert all(not raw_controls(cell) for row in shown for cell in row)
    assert shown[0][0].startswith("thr_[b]e[/b]\\x1b")


def test_the_view_says_when_there_is_no_thread(tmp_path: Path) -> None:
    """An empty list says so."""
    db = tmp_path / "empty.db"
    SwarmRepository(open_database(db)).close()
    foot: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("t")
        await settle(app, pilot)
        foot.append(str(app.screen.query_one("#threads-foot").render()))

    drive(db, script)
    assert foot[0].startswith("no thread yet")
