"""The ``pigeon-tui`` operator TUI, driven by Textual's Pilot against real WAL databases."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Label, Static

from pigeond.storage import SCHEMA_VERSION, open_database
from pigeond_tui.app import PigeonApp, main
from pigeond_tui.screens import ConfirmScreen, HelpScreen
from tests.hostile_text import EVIL_SHOWN, raw_controls
from tests.tui_support import (
    EVIL_ID,
    EVIL_ID_SHOWN,
    LATER,
    all_rows,
    drive,
    highlight,
    seed,
    seed_evil,
    settle,
    table_keys,
)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return seed(tmp_path / "pigeond.db")


@pytest.fixture
def evil_db(tmp_path: Path) -> Path:
    return seed_evil(tmp_path / "evil.db")


def row_of(path: Path, msg_id: str) -> tuple[str, int]:
    return all_rows(path)[msg_id]


def test_overview_counts_match_the_database(db: Path) -> None:
    """Counts by state (channel apart), queued per target and failed per target."""

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        assert app.snapshot is not None
        assert app.snapshot.direct == {"queued": 2, "failed": 1, "handed_off": 1}
        assert app.snapshot.channel == {"fanned_out": 1}  # ops has no member to copy it to
        counts = str(app.query_one("#counts", Static).render())
        assert "queued" in counts and "handed_off" in counts
        assert table_keys(app, "#queued") == ["ses_a"]
        queued = app.query_one("#queued", DataTable).get_row_at(0)
        assert [str(c) for c in queued] == ["ses_a", "2", "1m", "now", "accept"]
        failed = app.query_one("#failed", DataTable).get_row_at(0)
        assert [str(c) for c in failed] == ["ses_b", "1", "HTTP 500: boom"]
        # the default tab: queued messages, newest first (the channel message is fanned_out)
        assert table_keys(app, "#messages") == ["msg_q2", "msg_q1"]
        await pilot.press("6")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_c", "msg_d", "msg_f", "msg_q2", "msg_q1"]
        await pilot.press("3")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_d"]
        # the detail pane shows the highlighted row and its exact envelope
        detail = str(app.query_one("#detail", Static).render())
        assert "msg_d" in detail and 'to="ses_b"' in detail and "</swarm_message>" in detail
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)

    drive(db, script)


def test_filter_narrows_the_table_and_refresh_keeps_the_cursor(db: Path) -> None:
    """`/` + text filters on target, sender, kind or payload; Esc clears; `r` keeps the row."""

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("6")
        await settle(app, pilot)
        await highlight(app, pilot, "msg_f")
        await pilot.press("r")
        await settle(app, pilot)
        table = app.query_one("#messages", DataTable)
        assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == "msg_f"
        for text, expected in [
            ("ses_b", ["msg_d", "msg_f"]),  # target
            ("cron", ["msg_f"]),  # sender
            ("status.", ["msg_q2"]),  # kind
            ("alpha", ["msg_q1"]),  # payload
            ("ops", ["msg_c"]),  # channel
        ]:
            await pilot.press("slash")
            app.query_one("#filter").value = text  # type: ignore[attr-defined]
            await pilot.press("enter")
            await settle(app, pilot)
            assert table_keys(app, "#messages") == expected, text
        await pilot.press("escape")
        await settle(app, pilot)
        assert len(table_keys(app, "#messages")) == 5

    drive(db, script)


def test_requeue_a_failed_row_after_confirming(db: Path) -> None:
    """`u` on the failed row, Yes in the modal: only that row changes."""
    before = all_rows(db)

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("2")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_f"]
        await pilot.press("u")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(app, pilot)
        assert app.reports[-1] == "msg_f requeued"
        assert table_keys(app, "#messages") == []

    drive(db, script)
    after = all_rows(db)
    assert after.pop("msg_f") == ("queued", LATER)
    before.pop("msg_f")
    assert after == before


def test_no_in_the_modal_changes_nothing_and_cancel_changes_one_row(db: Path) -> None:
    """`x` then No leaves the row; `x` then Yes cancels exactly the highlighted queued row."""
    before = all_rows(db)

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "msg_q1")
        await pilot.press("x")
        await pilot.pause()
        await pilot.press("n")
        await settle(app, pilot)
        assert all_rows(db) == before
        await pilot.press("x")
        await pilot.pause()
        await pilot.click("#yes")
        await settle(app, pilot)
        assert app.reports[-1] == "msg_q1 cancelled"

    drive(db, script)
    after = all_rows(db)
    assert after.pop("msg_q1") == ("cancelled", LATER)
    before.pop("msg_q1")
    assert after == before


def test_a_stale_write_changes_nothing(db: Path) -> None:
    """The row changes behind the app's back while the modal is open: nothing is done."""

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "msg_q2")
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        conn = sqlite3.connect(db)
        with conn:
            conn.execute("UPDATE swarm_messages SET updated_at = ? WHERE msg_id = 'msg_q2'", (7,))
        conn.close()
        await pilot.press("y")
        await settle(app, pilot)
        assert app.reports[-1] == "retry-now: msg_q2 changed meanwhile, nothing done"

    drive(db, script)
    assert row_of(db, "msg_q2") == ("queued", 7)


def test_bulk_cancel_for_the_highlighted_target(db: Path) -> None:
    """`X` cancels every queued message to the highlighted row's target, nothing else."""
    before = all_rows(db)

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "msg_q1")
        await pilot.press("X")
        await pilot.pause()
        await pilot.press("y")
        await settle(app, pilot)
        assert app.reports[-1] == "ses_a: 2 message(s) cancelled"
        assert table_keys(app, "#messages") == []

    drive(db, script)
    after = all_rows(db)
    assert {m: after.pop(m)[0] for m in ("msg_q1", "msg_q2")} == {
        "msg_q1": "cancelled",
        "msg_q2": "cancelled",
    }
    for m in ("msg_q1", "msg_q2"):
        before.pop(m)
    assert after == before


@pytest.mark.parametrize("kind", ["missing", "not_pigeond", "newer"])
def test_an_unusable_database_exits_2_with_one_line(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.db"
    if kind == "not_pigeond":
        sqlite3.connect(path).execute("CREATE TABLE other (x)").connection.close()
    elif kind == "newer":
        open_database(path).close()
        conn = sqlite3.connect(path)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.close()
    assert main(["--db", str(path)], env={}) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("pigeon-tui: ")


def test_sort_cycles_and_survives_refresh(db: Path) -> None:
    """`s` cycles the order (newest, oldest, target, attempts) and a refresh keeps it."""

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("6")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_c", "msg_d", "msg_f", "msg_q2", "msg_q1"]
        await pilot.press("s")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_q1", "msg_q2", "msg_f", "msg_d", "msg_c"]
        await pilot.press("s")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_c", "msg_q2", "msg_q1", "msg_d", "msg_f"]
        await pilot.press("r")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_c", "msg_q2", "msg_q1", "msg_d", "msg_f"]
        await pilot.press("s")
        await settle(app, pilot)
        assert table_keys(app, "#messages")[0] == "msg_f"
        assert app.reports[-1] == "sorted by attempts"

    drive(db, script)


def test_bulk_cancel_of_the_filtered_view(db: Path) -> None:
    """`C` cancels exactly the queued messages the filtered table lists, after a Yes."""
    before = all_rows(db)

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("6")
        await settle(app, pilot)
        await pilot.press("slash")
        await pilot.pause()
        app.query_one("#filter").value = "alpha"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_q1"]
        await pilot.press("C")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(app, pilot)
        assert app.reports[-1] == "cancel: 1 of 1 done"

    drive(db, script)
    after = all_rows(db)
    assert after["msg_q1"][0] == "cancelled"
    assert {k: v for k, v in after.items() if k != "msg_q1"} == {
        k: v for k, v in before.items() if k != "msg_q1"
    }


def test_pages_through_a_window_at_a_time(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The table holds one window; `]` and `[` fetch the next and previous one."""
    monkeypatch.setattr("pigeond_tui.data.WINDOW", 2)

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("6")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_c", "msg_d"]
        await pilot.press("right_square_bracket")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_f", "msg_q2"]
        await pilot.press("right_square_bracket")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_q1"]
        await pilot.press("right_square_bracket")
        await settle(app, pilot)
        assert app.reports[-1] == "no further messages"
        await pilot.press("left_square_bracket")
        await settle(app, pilot)
        assert table_keys(app, "#messages") == ["msg_f", "msg_q2"]

    drive(db, script)


def test_table_cells_show_message_fields_escaped(evil_db: Path) -> None:
    """Message and per-target table cells show escapes and literal brackets, no raw controls;
    a cell too wide is cut between escapes, never inside one."""

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        cells = [str(c) for c in app.query_one("#messages", DataTable).get_row(EVIL_ID)]
        assert cells[:5] == [
            "msg_[b]e[/b]…=\\x07\\u202e", "queued", "ses_a\\x1b[…\\u202e",
            "ses_s[b]x[…\\u202e", "chat\\x1b…\\u202e",
        ]  # fmt: skip
        queued = [str(c) for c in app.query_one("#queued", DataTable).get_row_at(0)]
        assert queued[0] == "ses_a" + EVIL_SHOWN
        assert raw_controls("".join(cells + queued)) == set()

    drive(evil_db, script)


def test_detail_pane_shows_message_fields_escaped(evil_db: Path) -> None:
    """The detail pane shows every field and the payload escaped, payload lines kept."""

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        detail = str(app.query_one("#detail", Static).render())
        assert detail.startswith("msg_id             " + EVIL_ID_SHOWN + "\n")
        assert "\nfrom_session       ses_s[b]x[/b]" + EVIL_SHOWN + "\n" in detail
        assert "\none " + EVIL_SHOWN + "\ntwo [link=https://evil.example]x[/link]\n" in detail
        assert 'kind="chat' + EVIL_SHOWN + '"' in detail
        assert raw_controls(detail) == set()

    drive(evil_db, script)


def test_confirmation_and_notification_show_fields_escaped(evil_db: Path) -> None:
    """The Yes/No question and the outcome notice show the msg_id escaped, not as markup."""

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("x")
        await pilot.pause()
        question = str(app.screen.query_one("#question", Label).render())
        assert question == f"cancel {EVIL_ID_SHOWN} (queued, to ses_a{EVIL_SHOWN})?"
        await pilot.press("y")
        await settle(app, pilot)
        assert app.reports[-1] == f"{EVIL_ID_SHOWN} cancelled"
        toasts = [str(toast.render()) for toast in app.screen.query("Toast")]
        assert toasts == [f"{EVIL_ID_SHOWN} cancelled"]
        assert raw_controls(question + "".join(toasts)) == set()

    drive(evil_db, script, notifications=True)
