"""The TUI's "held" view: ``h`` lists what the conversation brakes hold (why, which thread,
what it has cost so far); ``l`` releases with the count started over, ``+`` raises the
thread's limit by N, ``o`` releases once, ``d`` drops after a question; each acts on the
database as ``pigeon release`` / ``pigeon drop`` do."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import DataTable, Input

from pigeond.model import NOTICE_KIND, Hold, State
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.repository import Accept
from pigeond_tui.app import PigeonApp
from pigeond_tui.held import HELD_VIEW_COLUMNS, HeldScreen
from pigeond_tui.screens import ConfirmScreen, NumberScreen
from testkit.messages import new_message
from tests.hostile_text import EVIL, EVIL_SHOWN, raw_controls
from tests.tui_support import (
    BUDGET,
    LATER,
    NOW,
    PAIR,
    THREAD,
    A,
    B,
    drive,
    seed_held,
    settle,
    table_rows,
)


def reopen(db: Path) -> SwarmRepository:
    return SwarmRepository(open_database(db))


async def open_held(app: PigeonApp, pilot: Pilot[None]) -> None:
    await pilot.press("h")
    await settle(app, pilot)


def test_h_lists_each_held_message_with_why_and_its_thread_s_cost(tmp_path: Path) -> None:
    """One row per held message: msg_id, from, to, thread, brake, age, the thread's cost
    so far, reason and payload; Esc closes."""
    db = seed_held(tmp_path / "p.db")
    seen: dict[str, object] = {}
    shown: list[list[str]] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        seen["screen"] = type(app.screen)
        table = app.screen.query_one("#held-table", DataTable)
        seen["columns"] = [str(c.label) for c in table.columns.values()]
        shown.extend(table_rows(app, "#held-table"))
        await pilot.press("escape")
        await settle(app, pilot)
        seen["after"] = type(app.screen)

    drive(db, script)
    assert seen["screen"] is HeldScreen and seen["after"] is not HeldScreen
    assert seen["columns"] == list(HELD_VIEW_COLUMNS)
    [row] = shown
    assert row[:7] == [
        "msg_held", A, B, THREAD, "hops", "1m", "1 turn, 52,310 tokens, $0.2500",
    ]  # fmt: skip
    assert row[7].startswith(f"thread {THREAD} reached 2 hops") and row[8] == "echo msg_held"


def test_l_releases_it_due_now_and_starts_the_thread_s_hops_over(tmp_path: Path) -> None:
    """release (reset): queued, due now, no longer held; the thread's hops are 0."""
    db = seed_held(tmp_path / "p.db")
    left: list[list[list[str]]] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        await pilot.press("l")
        await settle(app, pilot)
        left.append(table_rows(app, "#held-table"))

    app = drive(db, script)
    assert left == [[]] and "msg_held: released (reset)" in app.reports
    repo = reopen(db)
    message, thread = repo.get("msg_held"), repo.thread(THREAD)
    repo.close()
    assert message is not None and thread is not None
    assert (message.state, message.hold_kind, message.next_retry_at) == (State.QUEUED, None, LATER)
    assert (thread.hops, thread.reset_at) == (0, LATER)


def test_plus_raises_the_thread_s_hop_limit_by_the_n_given(tmp_path: Path) -> None:
    """raise: a question for N (the hop option's 12 filled in); 5 makes the limit hops + 5
    and the message goes, the hops kept."""
    db = seed_held(tmp_path / "p.db")
    asked: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        await pilot.press("plus")
        await settle(app, pilot)
        assert isinstance(app.screen, NumberScreen)
        box = app.screen.query_one("#number-input", Input)
        asked.append(box.value)
        box.value = "5"
        await pilot.press("enter")
        await settle(app, pilot)

    app = drive(db, script)
    assert asked == ["12"] and "msg_held: released (raise by 5)" in app.reports
    repo = reopen(db)
    message, thread = repo.get("msg_held"), repo.thread(THREAD)
    repo.close()
    assert message is not None and message.next_retry_at == LATER
    assert thread is not None and (thread.hops, thread.hop_limit) == (2, 7)


def test_a_budget_hold_s_raise_offers_as_many_tokens_again(tmp_path: Path) -> None:
    """raise on a budget hold: the tokens the thread used so far filled in; taken, the
    thread's own token budget is what it used plus that."""
    db = seed_held(tmp_path / "p.db", BUDGET)
    asked: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        await pilot.press("plus")
        await settle(app, pilot)
        asked.append(app.screen.query_one("#number-input", Input).value)
        await pilot.press("enter")
        await settle(app, pilot)

    app = drive(db, script)
    assert asked == ["52310"] and "msg_held: released (raise by 52310)" in app.reports
    repo = reopen(db)
    thread = repo.thread(THREAD)
    repo.close()
    assert thread is not None and thread.token_budget == 2 * 52_310


def test_the_question_for_n_takes_only_a_whole_number_of_at_least_1(tmp_path: Path) -> None:
    """0 or words: the question stays and says what it wants; nothing is released."""
    db = seed_held(tmp_path / "p.db")
    said: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        await pilot.press("plus")
        await settle(app, pilot)
        for typed in ("0", "many"):
            app.screen.query_one("#number-input", Input).value = typed
            await pilot.press("enter")
            await settle(app, pilot)
            assert isinstance(app.screen, NumberScreen)
            said.append(str(app.screen.query_one("#number-foot").render()))

    drive(db, script)
    assert said == ["a whole number of at least 1, please"] * 2
    repo = reopen(db)
    message = repo.get("msg_held")
    repo.close()
    assert message is not None and message.hold_kind == "brake"


def test_escape_in_the_question_for_n_releases_nothing(tmp_path: Path) -> None:
    """raise, then Esc: the message stays held."""
    db = seed_held(tmp_path / "p.db")

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        await pilot.press("plus")
        await settle(app, pilot)
        await pilot.press("escape")
        await settle(app, pilot)
        assert isinstance(app.screen, HeldScreen)

    drive(db, script)
    repo = reopen(db)
    message = repo.get("msg_held")
    repo.close()
    assert message is not None and message.hold_kind == "brake"


def test_o_releases_only_this_one(tmp_path: Path) -> None:
    """once: the message goes; the thread's hops and limit stay as they were."""
    db = seed_held(tmp_path / "p.db")

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        await pilot.press("o")
        await settle(app, pilot)

    app = drive(db, script)
    assert "msg_held: released (once)" in app.reports
    repo = reopen(db)
    message, thread = repo.get("msg_held"), repo.thread(THREAD)
    repo.close()
    assert message is not None and (message.hold_kind, message.next_retry_at) == (None, LATER)
    assert thread is not None and (thread.hops, thread.hop_limit) == (2, None)


def test_d_asks_then_drops_and_the_sender_is_told(tmp_path: Path) -> None:
    """drop: a Yes/No question; yes ends it cancelled, and its sender's notice is queued."""
    db = seed_held(tmp_path / "p.db")
    questions: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        await pilot.press("d")
        await settle(app, pilot)
        assert isinstance(app.screen, ConfirmScreen)
        questions.append(app.screen.question)
        await pilot.press("y")
        await settle(app, pilot)

    app = drive(db, script)
    assert questions[0].startswith("drop msg_held (hops, from ses_a)?")
    assert "msg_held: dropped by a person (its sender is told)" in app.reports
    repo = reopen(db)
    message = repo.get("msg_held")
    [notice] = repo.ready_batch(A, LATER, 10)
    repo.close()
    assert message is not None and message.state == State.CANCELLED
    assert notice.kind == NOTICE_KIND and "dropped by a person" in notice.payload


def test_no_to_the_drop_question_drops_nothing(tmp_path: Path) -> None:
    """drop, then n: still held."""
    db = seed_held(tmp_path / "p.db")

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        await pilot.press("d")
        await settle(app, pilot)
        await pilot.press("n")
        await settle(app, pilot)

    drive(db, script)
    repo = reopen(db)
    message = repo.get("msg_held")
    repo.close()
    assert message is not None and (message.state, message.hold_kind) == (State.QUEUED, "brake")


def test_raise_on_a_brake_without_a_limit_only_says_why(tmp_path: Path) -> None:
    """A pair-rate hold has no limit to raise: no question, a notice naming the other
    releases, and the message stays held."""
    db = seed_held(tmp_path / "p.db", PAIR)

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        await pilot.press("plus")
        await settle(app, pilot)
        assert isinstance(app.screen, HeldScreen)

    app = drive(db, script)
    assert app.reports[-1] == (
        "raise msg_held (pair_rate): its brake has no limit to raise;"
        " release it with l (its count starts over) or o (once)"
    )
    repo = reopen(db)
    message = repo.get("msg_held")
    repo.close()
    assert message is not None and message.hold_kind == "brake"


def test_a_message_decided_meanwhile_says_so(tmp_path: Path) -> None:
    """Released behind the view's back (pigeon release): the view's release says it is
    no longer held, and changes nothing more."""
    db = seed_held(tmp_path / "p.db")

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        repo = reopen(db)
        repo.drop_brake_hold("msg_held", LATER)
        repo.close()
        await pilot.press("l")
        await settle(app, pilot)

    app = drive(db, script)
    assert app.reports[-1] == "release msg_held: not held by a brake (state cancelled)"


def test_the_view_says_when_nothing_is_held(tmp_path: Path) -> None:
    """An empty list says so, and its keys."""
    db = tmp_path / "empty.db"
    SwarmRepository(open_database(db)).close()
    foot: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        foot.append(str(app.screen.query_one("#held-foot").render()))
        await pilot.press("l")
        await settle(app, pilot)

    app = drive(db, script)
    assert foot[0].startswith("nothing is held  l release  + raise")
    assert app.reports[-1] == "reset: no held message highlighted"


def test_hostile_text_in_a_held_message_is_shown_as_data(tmp_path: Path) -> None:
    """Sender, thread, reason and payload with escapes, a bidi override and markup: shown
    escaped in the table and the detail below it, the markup as written."""
    db = tmp_path / "p.db"
    repo = SwarmRepository(open_database(db))
    thread = "thr_[b]t[/b]" + EVIL
    message = new_message(B, msg_id="msg_evil", sender="ses_s" + EVIL, payload="p " + EVIL)
    hold = Hold("repeat", "[b]x[/b]" + EVIL)
    repo.accept_many([Accept(message, NOW, NOW + 60_000, thread_id=thread, brake_hold=hold)])
    repo.close()
    shown: list[list[str]] = []
    detail: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await open_held(app, pilot)
        shown.extend(table_rows(app, "#held-table"))
        detail.append(str(app.screen.query_one("#held-detail").render()))

    drive(db, script)
    assert "reason  [b]x[/b]" + EVIL_SHOWN in detail[0] and not raw_controls(detail[0])
    [row] = shown
    assert (row[1], row[3]) == ("ses_s" + EVIL_SHOWN, "thr_[b]t[/b]" + EVIL_SHOWN)
    assert row[7].startswith("[b]x[/b]\\x1b[2J") and row[8].startswith("p \\x1b[2J")
    assert all(not raw_controls(cell) for cell in row)
