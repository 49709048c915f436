"""The TUI's names and channels view: ``c`` opens it over the main view; it lists the held
names, the channels with members and the highlighted channel's members, escaped."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable, Label

from pigeond.storage import SwarmRepository, open_database
from pigeond_tui.addressing import AddressingScreen
from pigeond_tui.app import PigeonApp
from tests.hostile_text import EVIL, EVIL_SHOWN, raw_controls
from tests.tui_support import MAX_MEMBERS, NOW, drive, seed_addressing, settle, table_rows


def label(app: PigeonApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Label).render())


def test_c_lists_names_channels_and_the_highlighted_channel_s_members(tmp_path: Path) -> None:
    """Names by name, channels by name with their member count and last message, and the
    members of the channel under the cursor, which follow it; Esc closes."""
    db = seed_addressing(tmp_path / "a.db")
    seen: dict[str, object] = {}

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("c")
        await settle(app, pilot)
        seen["screen"] = type(app.screen)
        seen["names"] = table_rows(app, "#names-table")
        seen["channels"] = table_rows(app, "#channels-table")
        seen["dev"] = (label(app, "#members-title"), table_rows(app, "#members-table"))
        await pilot.press("down")
        await settle(app, pilot)
        seen["ops"] = (label(app, "#members-title"), table_rows(app, "#members-table"))
        seen["foot"] = label(app, "#addressing-foot")
        seen["help"] = label(app, "#addressing-help")
        await pilot.press("escape")
        await settle(app, pilot)
        seen["after"] = type(app.screen)

    drive(db, script)
    assert seen["screen"] is AddressingScreen
    assert seen["names"] == [
        ["reviewer", "ses_a", "1h ago", "1m ago"],  # last seen: its send to ops
        ["writer", "ses_b", "1m ago", "1m ago"],
    ]
    assert seen["channels"] == [["dev", "1", "-"], ["ops", "2", "1m ago"]]
    assert seen["dev"] == ("members of dev", [["ses_c", "-", "1m ago"]])
    assert seen["ops"] == (
        "members of ops",
        [["ses_a", "reviewer", "1m ago"], ["ses_b", "writer", "1m ago"]],
    )
    assert seen["foot"] == "2 name(s) held, 2 channel(s) with members"
    help_line = seen["help"]
    assert isinstance(help_line, str)
    assert "Read-only" in help_line and "pigeon channel join|leave" in help_line
    assert help_line.endswith("r refresh  tab next table  esc/c/q close")
    assert "Read-only" in help_line and "pigeon channel join|leave" in help_line
    assert seen["after"] is not AddressingScreen


def test_a_refresh_keeps_the_highlighted_channel(tmp_path: Path) -> None:
    """``r`` reads again: a channel joined meanwhile shows, sorted before the highlighted
    one, and the cursor stays on its channel, whose new member shows too."""
    db = seed_addressing(tmp_path / "a.db")
    seen: dict[str, object] = {}

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("c")
        await settle(app, pilot)
        await pilot.press("down")
        await settle(app, pilot)
        repo = SwarmRepository(open_database(db))
        repo.join_channel("arch", "ses_d", NOW + 5, MAX_MEMBERS)
        repo.join_channel("ops", "ses_d", NOW + 5, MAX_MEMBERS)
        repo.close()
        await pilot.press("r")
        await settle(app, pilot)
        seen["channels"] = [row[0] for row in table_rows(app, "#channels-table")]
        seen["cursor"] = app.screen.query_one("#channels-table", DataTable).cursor_row
        seen["members"] = [row[0] for row in table_rows(app, "#members-table")]

    drive(db, script)
    assert seen["channels"] == ["arch", "dev", "ops"]
    assert seen["cursor"] == 2
    assert seen["members"] == ["ses_a", "ses_b", "ses_d"]


def test_the_view_says_when_there_is_nothing_to_show(tmp_path: Path) -> None:
    """No name and no channel: empty tables, and the foot says so."""
    db = tmp_path / "empty.db"
    SwarmRepository(open_database(db)).close()
    seen: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("c")
        await settle(app, pilot)
        seen.append(label(app, "#addressing-foot"))
        seen.append(label(app, "#members-title"))
        assert table_rows(app, "#names-table") == table_rows(app, "#channels-table") == []

    drive(db, script)
    assert seen[0] == "0 name(s) held, 0 channel(s) with members"
    assert seen[1] == "members"


EVIL_NAME = "rev[b]x[/b]" + EVIL  # markup too: it must show as written, not turn bold
EVIL_SESSION = "ses_e[link=https://evil.example]x[/link]" + EVIL
EVIL_CHANNEL = "ops[b]x[/b]" + EVIL


def seed_hostile(path: Path) -> Path:
    """A name, a session and a channel written by another tool, straight into the tables:
    escapes, OSC 52, U+202E and markup, none of which the API would have taken."""
    SwarmRepository(open_database(path)).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "INSERT INTO swarm_names (name, session, claimed_at, last_seen_at) VALUES (?, ?, ?, ?)",
            (EVIL_NAME, EVIL_SESSION, NOW, NOW),
        )
        conn.execute(
            "INSERT INTO swarm_channel_members (channel, session, joined_at) VALUES (?, ?, ?)",
            (EVIL_CHANNEL, EVIL_SESSION, NOW),
        )
    conn.close()
    return path


def test_hostile_names_sessions_and_channels_show_escaped(tmp_path: Path) -> None:
    """Every cell and the members' title show the text as written, its controls escaped
    and its markup not parsed."""
    db = seed_hostile(tmp_path / "evil.db")
    tables: dict[str, list[list[str]]] = {}
    titles: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("c")
        await settle(app, pilot)
        for selector in ("#names-table", "#channels-table", "#members-table"):
            table = app.screen.query_one(selector, DataTable)
            cells = [cell for i in range(table.row_count) for cell in table.get_row_at(i)]
            assert all(isinstance(cell, Text) and not cell.spans for cell in cells)
            tables[selector] = table_rows(app, selector)
        titles.append(label(app, "#members-title"))

    drive(db, script)
    name = "rev[b]x[/b]" + EVIL_SHOWN
    session = "ses_e[link=https://evil.example]x[/link]" + EVIL_SHOWN
    channel = "ops[b]x[/b]" + EVIL_SHOWN
    assert tables == {
        "#names-table": [[name, session, "1m ago", "1m ago"]],
        "#channels-table": [[channel, "1", "-"]],
        "#members-table": [[session, name, "1m ago"]],
    }
    assert titles == ["members of " + channel]
    shown = [cell for table in tables.values() for row in table for cell in row]
    assert not any(raw_controls(text) for text in [*shown, *titles])
