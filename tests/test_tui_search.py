"""The TUI's ``/`` filter runs the full-text search: it finds by word, in the state tab."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from pigeond.storage import SwarmRepository, open_database
from pigeond_tui.app import PigeonApp
from pigeond_tui.data import read_snapshot
from testkit.messages import new_message
from tests.tui_support import LATER, NOW, drive, settle, table_keys


def seed_words(path: Path) -> Path:
    """Three queued messages; two say "deploy", one of them among other words."""
    repo = SwarmRepository(open_database(path))
    repo.accept(new_message(msg_id="msg_1", payload="please deploy tonight"), NOW)
    repo.accept(new_message(msg_id="msg_2", payload="Deploy: done"), NOW + 1)
    repo.accept(new_message(msg_id="msg_3", payload="redeployment later"), NOW + 2)
    repo.close()
    return path


def test_the_filter_finds_messages_by_word(tmp_path: Path) -> None:
    """`/deploy`: the messages with the word, whatever its case; not a longer word holding it."""
    db = seed_words(tmp_path / "w.db")

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("slash")
        app.query_one("#filter").value = "deploy"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_2", "msg_1"]

    drive(db, script)


def test_text_without_a_word_filters_everything_out(tmp_path: Path) -> None:
    """A filter of punctuation only (`*`) lists nothing rather than failing."""
    db = seed_words(tmp_path / "w.db")
    assert read_snapshot(db, None, "*", 0, LATER).messages == []
