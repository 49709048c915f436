"""What pigeon-tui's tables show: when a held target is really tried next, and every
message column, age and last_error included, on a 200-column terminal."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable

from pigeond.cli.presentation import TABLE_COLUMNS
from pigeond.storage import SwarmRepository, open_database
from pigeond_tui.app import PigeonApp
from pigeond_tui.widgets import MessageTable
from testkit.messages import new_message
from tests.tui_support import HOUR, LATER, LONG_ERROR, NOW, drive, seed_real, settle

HELD_AT = LATER - 10_000  # opencode was unreachable 10 s before the app's clock ...
HELD_UNTIL = HELD_AT + 30_000  # ... so the head of ses_h's queue is held for 30 s


@pytest.fixture
def held_db(tmp_path: Path) -> Path:
    """ses_h's head held by an outage (as the arbiter records one), and a message sent
    to ses_h after it, due at once but queued behind the head."""
    path = tmp_path / "held.db"
    repo = SwarmRepository(open_database(path))
    repo.accept(new_message("ses_h", msg_id="msg_head"), NOW, NOW + HOUR)
    assert repo.record_outage(["msg_head"], "connection refused", HELD_AT, HELD_UNTIL)
    repo.accept(new_message("ses_h", msg_id="msg_behind"), HELD_AT + 5_000, NOW + HOUR)
    repo.close()
    return path


def test_a_held_target_is_not_due_although_a_message_of_it_is(held_db: Path) -> None:
    """Why the earliest next_retry_at would be wrong: a message behind the held head is
    due, yet nothing is handed off before the head's hold ends, which is what the
    per-target next retry says."""
    repo = SwarmRepository(open_database(held_db))
    try:
        behind = repo.get("msg_behind")
        assert behind is not None and behind.next_retry_at is not None
        assert behind.next_retry_at <= LATER
        [queue] = repo.queued_per_target(LATER)
        assert queue.next_retry_at == HELD_UNTIL
        assert repo.ready_batch("ses_h", LATER, 10) == []
        assert [m.msg_id for m in repo.ready_batch("ses_h", HELD_UNTIL, 10)] == [
            "msg_head",
            "msg_behind",
        ]
    finally:
        repo.close()


def test_next_retry_shows_when_a_held_target_is_tried(held_db: Path) -> None:
    """The queued-per-target row of a target held for 30 s says "in 20s" 10 s later."""
    rows: list[list[str]] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        rows.append([str(c) for c in app.query_one("#queued", DataTable).get_row_at(0)])

    drive(held_db, script)
    assert rows == [["ses_h", "2", "1m", "in 20s", "accept"]]


def column_spans(table: DataTable[object]) -> dict[str, tuple[int, int]]:
    """Each column's first and last-plus-one x inside the table, scrolled to the left."""
    spans: dict[str, tuple[int, int]] = {}
    left = 0
    for column in table.ordered_columns:
        width = column.get_render_width(table)
        spans[str(column.label)] = (left, left + width)
        left += width
    return spans


@dataclass
class Seen:
    spans: dict[str, tuple[int, int]]  # each column's x range, scrolled to the left
    visible: int  # the table's visible width
    right: int  # the table's right edge on screen
    max_scroll_x: int
    error: str  # the last_error cell of a message whose error is long


def test_the_all_tab_at_200_columns_shows_every_column(tmp_path: Path) -> None:
    """Real-length ids and a long error: msg_id through last_error fit in the visible table,
    with no sideways scrolling, and the error is cut with ``…`` to the room left."""
    db = seed_real(tmp_path / "real.db")
    seen: list[Seen] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("6")
        await settle(app, pilot)
        table = app.query_one("#messages", DataTable)
        error = str(table.get_row("msg_mhfz1k3q_9f3a6c11")[-1])
        seen.append(
            Seen(
                column_spans(table), table.scrollable_content_region.width, table.region.right,
                table.max_scroll_x, error,
            )
        )  # fmt: skip

    drive(db, script, size=(200, 50))
    [at_200] = seen
    spans = at_200.spans
    assert list(spans) == list(TABLE_COLUMNS)
    assert spans["age"][1] <= spans["last_error"][0] < spans["last_error"][1] <= at_200.visible
    assert at_200.max_scroll_x == 0 and at_200.right <= 200
    assert len(at_200.error) >= 20 and at_200.error.endswith("…")
    assert LONG_ERROR.startswith(at_200.error[:-1])


def test_a_wider_terminal_gives_last_error_more_room(tmp_path: Path) -> None:
    """After a resize the error column is measured again: wider terminal, longer error."""
    db = seed_real(tmp_path / "real.db")
    errors: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("6")
        await settle(app, pilot)
        table = app.query_one("#messages", DataTable)
        errors.append(str(table.get_row("msg_mhfz1k3q_9f3a6c11")[-1]))
        await pilot.resize_terminal(240, 50)
        await settle(app, pilot)
        errors.append(str(table.get_row("msg_mhfz1k3q_9f3a6c11")[-1]))
        assert table.max_scroll_x == 0

    drive(db, script, size=(200, 50))
    narrow, wide = errors
    assert len(wide) > len(narrow) and LONG_ERROR.startswith(wide[:-1])


def test_a_resize_that_keeps_the_width_does_not_refill_the_table(tmp_path: Path) -> None:
    """Only a new width changes last_error's room: a resize event at the width the table
    was filled at (at start, one comes after the first snapshot is shown) refills nothing,
    since refilling 500 rows is most of what the first screen costs; a new width does."""
    db = seed_real(tmp_path / "real.db")
    fills: dict[str, int] = {}

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        fill = app.show_messages
        count = [0]

        def counted() -> None:
            count[0] += 1
            fill()

        app.show_messages = counted  # type: ignore[method-assign]
        table = app.query_one("#messages", MessageTable)
        table.post_message(MessageTable.Resized())
        await settle(app, pilot)
        fills["same width"] = count[0]
        await pilot.resize_terminal(240, 50)
        await settle(app, pilot)
        fills["wider"] = count[0] - fills["same width"]

    drive(db, script, size=(200, 50))
    assert fills == {"same width": 0, "wider": 1}
