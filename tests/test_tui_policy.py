"""The TUI's consent: the policy column of "queued per target", and ``p`` to set the
highlighted row's target's policy or release what it holds."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import DataTable

from pigeond.consent import Policy, held_reason
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.repository import Accept
from pigeond_tui.app import PigeonApp
from pigeond_tui.consent import PolicyScreen
from testkit.messages import new_message
from tests.tui_support import HOUR, LATER, NOW, drive, highlight, settle


def seed_held(path: Path) -> Path:
    """ses_h holds one message from ses_a; ses_a has one queued as usual."""
    repo = SwarmRepository(open_database(path))
    repo.set_policy("ses_h", Policy.HOLD, (), NOW, "ses_h")
    held = held_reason("ses_h", Policy.HOLD)
    message = new_message("ses_h", msg_id="msg_held", sender="ses_a")
    repo.accept_many([Accept(message, NOW, NOW + HOUR, held=held)])
    repo.accept(new_message("ses_a", msg_id="msg_free"), NOW + 1, NOW + HOUR)
    repo.close()
    return path


def policy_column(app: PigeonApp) -> dict[str, str]:
    table = app.query_one("#queued", DataTable)
    rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
    return {row[0]: row[-1] for row in rows}


def test_queued_per_target_shows_each_target_s_policy(tmp_path: Path) -> None:
    """A holding target shows its policy and held count; any other shows accept."""
    db = seed_held(tmp_path / "p.db")
    seen: dict[str, dict[str, str]] = {}

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        seen["column"] = policy_column(app)

    drive(db, script)
    assert seen["column"] == {"ses_h": "hold, 1 held", "ses_a": "accept"}


def test_p_then_a_switches_the_target_to_accept_and_releases(tmp_path: Path) -> None:
    """``p`` opens the target's policy screen; ``a`` sets accept, releasing what it held."""
    db = seed_held(tmp_path / "p.db")
    seen: dict[str, object] = {}

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "msg_held")
        await pilot.press("p")
        await settle(app, pilot)
        seen["screen"] = type(app.screen)
        await pilot.press("a")
        await settle(app, pilot)
        seen["after"] = type(app.screen)
        seen["column"] = policy_column(app)

    app = drive(db, script)
    assert seen["screen"] is PolicyScreen and seen["after"] is not PolicyScreen
    assert "ses_h accept: 0 held, 1 released" in app.reports
    assert seen["column"] == {"ses_h": "accept", "ses_a": "accept"}
    repo = SwarmRepository(open_database(db))
    assert [m.msg_id for m in repo.ready_batch("ses_h", LATER, 10)] == ["msg_held"]
    repo.close()


def test_p_then_l_releases_and_keeps_the_policy(tmp_path: Path) -> None:
    """``l`` releases what the target holds; the target still holds."""
    db = seed_held(tmp_path / "p.db")

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "msg_held")
        await pilot.press("p")
        await settle(app, pilot)
        await pilot.press("l")
        await settle(app, pilot)

    app = drive(db, script)
    assert "ses_h: 1 held message(s) released" in app.reports
    repo = SwarmRepository(open_database(db))
    assert repo.policy_of("ses_h").policy is Policy.HOLD
    repo.close()


def test_escape_closes_the_policy_screen_changing_nothing(tmp_path: Path) -> None:
    """Esc leaves the policy as it was."""
    db = seed_held(tmp_path / "p.db")

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "msg_held")
        await pilot.press("p")
        await settle(app, pilot)
        await pilot.press("escape")
        await settle(app, pilot)

    drive(db, script)
    repo = SwarmRepository(open_database(db))
    assert repo.held_counts() == {"ses_h": 1}
    repo.close()
