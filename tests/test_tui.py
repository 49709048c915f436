"""The ``pigeon-tui`` operator TUI, driven by Textual's Pilot against real WAL databases.

The tests are plain sync functions that run the app with ``asyncio.run`` so they
do not meet pytest-twisted's reactor.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from textual.coordinate import Coordinate
from textual.pilot import Pilot
from textual.widgets import DataTable, Label, Static

from pigeond.storage import SCHEMA_VERSION, SwarmRepository, open_database
from tests.messages import new_message
from tests.test_terminal import EVIL, EVIL_SHOWN, raw_controls
from tui.app import ConfirmScreen, HelpScreen, PigeonApp, main

NOW = 1_793_491_200_000
LATER = NOW + 90_000
HOUR = 3_600_000


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    """Queued (two targets), failed, delivered and a channel message."""
    path = tmp_path / "pigeond.db"
    repo = SwarmRepository(open_database(path))
    repo.accept(new_message("ses_a", msg_id="msg_q1", payload="alpha <b>"), NOW, NOW + HOUR)
    repo.accept(new_message("ses_a", msg_id="msg_q2", kind="status.update"), NOW + 1, NOW + HOUR)
    repo.accept(new_message("ses_b", msg_id="msg_f", sender="cron"), NOW + 2, NOW + HOUR)
    repo.record_failed_attempt("msg_f", "HTTP 500: boom", NOW + 3, None)
    repo.accept(new_message("ses_b", msg_id="msg_d"), NOW + 4, NOW + HOUR)
    assert repo.mark_handed_off("msg_d", NOW + 5)
    repo.accept(new_message(channel="ops", msg_id="msg_c"), NOW + 6)
    repo.close()
    yield path


EVIL_ID = "msg_[b]e[/b]" + EVIL  # markup too: it must show as written, not turn bold
EVIL_ID_SHOWN = "msg_[b]e[/b]" + EVIL_SHOWN
EVIL_PAYLOAD = "one " + EVIL + "\ntwo [link=https://evil.example]x[/link]"


@pytest.fixture
def evil_db(tmp_path: Path) -> Iterator[Path]:
    """One queued message written by another tool: escapes, U+202E and markup in every field."""
    path = tmp_path / "evil.db"
    repo = SwarmRepository(open_database(path))
    evil = new_message(
        "ses_a" + EVIL, msg_id=EVIL_ID, sender="ses_s[b]x[/b]" + EVIL, kind="chat" + EVIL,
        payload=EVIL_PAYLOAD,
    )  # fmt: skip
    repo.accept(evil, NOW, NOW + HOUR)
    repo.close()
    yield path


def row_of(path: Path, msg_id: str) -> tuple[str, int]:
    conn = sqlite3.connect(path)
    try:
        state, updated_at = conn.execute(
            "SELECT state, updated_at FROM swarm_messages WHERE msg_id = ?", (msg_id,)
        ).fetchone()
        return str(state), int(updated_at)
    finally:
        conn.close()


def all_rows(path: Path) -> dict[str, tuple[str, int]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT msg_id, state, updated_at FROM swarm_messages").fetchall()
        return {str(m): (str(s), int(u)) for m, s, u in rows}
    finally:
        conn.close()


def drive(
    path: Path,
    script: Callable[[PigeonApp, Pilot[None]], Awaitable[None]],
    *,
    notifications: bool = False,
) -> PigeonApp:
    """Run the app headless (no timer refresh: interval one hour) and play ``script``."""
    app = PigeonApp(path, clock=lambda: LATER, interval=3600)

    async def run() -> None:
        async with app.run_test(size=(160, 50), notifications=notifications) as pilot:
            await settle(app, pilot)
            await script(app, pilot)

    asyncio.run(run())
    return app


async def settle(app: PigeonApp, pilot: Pilot[None]) -> None:
    """Let workers finish and their results reach the screen."""
    for _ in range(3):
        await pilot.pause()
        await app.workers.wait_for_complete()
    await pilot.pause()


def table_keys(app: PigeonApp, selector: str) -> list[str]:
    table = app.query_one(selector, DataTable)
    return [
        str(table.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value)
        for i in range(table.row_count)
    ]


async def highlight(app: PigeonApp, pilot: Pilot[None], msg_id: str) -> None:
    table = app.query_one("#messages", DataTable)
    table.move_cursor(row=table.get_row_index(msg_id))
    await pilot.pause()


def test_overview_counts_match_the_database(db: Path) -> None:
    """Counts by state (channel apart), queued per target and failed per target."""

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        assert app.snapshot is not None
        assert app.snapshot.direct == {"queued": 2, "failed": 1, "handed_off": 1}
        assert app.snapshot.channel == {"queued": 1}
        counts = str(app.query_one("#counts", Static).render())
        assert "queued" in counts and "handed_off" in counts
        assert table_keys(app, "#queued") == ["ses_a"]
        queued = app.query_one("#queued", DataTable).get_row_at(0)
        assert [str(c) for c in queued] == ["ses_a", "2", "1m", "now"]
        failed = app.query_one("#failed", DataTable).get_row_at(0)
        assert [str(c) for c in failed] == ["ses_b", "1", "HTTP 500: boom"]
        # the default tab: queued messages, newest first, channel included
        assert table_keys(app, "#messages") == ["msg_c", "msg_q2", "msg_q1"]
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
        assert app.reports[-1] == "msg_f: requeue done"
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
        assert app.reports[-1] == "msg_q1: cancel done"

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
        assert app.reports[-1] == "msg_q2: changed meanwhile, nothing done"

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
        assert app.reports[-1] == "cancel ses_a: 2 message(s)"
        assert table_keys(app, "#messages") == ["msg_c"]

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
    monkeypatch.setattr("tui.data.WINDOW", 2)

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
    """Message and per-target table cells show escapes and literal brackets, no raw controls."""

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        cells = [str(c) for c in app.query_one("#messages", DataTable).get_row(EVIL_ID)]
        assert cells[:5] == [
            EVIL_ID_SHOWN, "queued", "ses_a" + EVIL_SHOWN, "ses_s[b]x[/b]" + EVIL_SHOWN,
            "chat" + EVIL_SHOWN,
        ]  # fmt: skip
        queued = [str(c) for c in app.query_one("#queued", DataTable).get_row_at(0)]
        assert queued[0] == "ses_a" + EVIL_SHOWN
        assert raw_controls("".join(cells + queued)) == set()

    drive(evil_db, script)


def test_detail_pane_shows_message_fields_escaped(evil_db: Path) -> None:
    """The detail pane shows every field and the payload escaped, payload lines kept."""

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        detail = str(app.query_one("#detail", Static).render())
        assert "  from ses_s[b]x[/b]" + EVIL_SHOWN + "\n" in detail
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
        assert app.reports[-1] == f"{EVIL_ID_SHOWN}: cancel done"
        toasts = [str(toast.render()) for toast in app.screen.query("Toast")]
        assert toasts == [f"{EVIL_ID_SHOWN}: cancel done"]
        assert raw_controls(question + "".join(toasts)) == set()

    drive(evil_db, script, notifications=True)
