"""pigeon-tui's keys: the help is made from the bindings, and an action is offered only
where the highlighted row's state allows it (never a question for an impossible one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.app import App
from textual.binding import Binding
from textual.pilot import Pilot
from textual.widgets import Static

from pigeond_tui.app import PigeonApp
from pigeond_tui.keys import KEYS, help_keys
from pigeond_tui.screens import ConfirmScreen, HelpScreen
from tests.docs_pages import page, section
from tests.tui_support import all_rows, drive, highlight, seed, settle

ROW_KEYS = ("u", "n", "x", "U", "X")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return seed(tmp_path / "pigeond.db")


async def on_row(app: PigeonApp, pilot: Pilot[None], msg_id: str) -> None:
    """The all tab, ``msg_id`` highlighted."""
    await pilot.press("6")
    await settle(app, pilot)
    await highlight(app, pilot, msg_id)


def test_the_help_screen_lists_every_binding_with_its_help(db: Path) -> None:
    """One help line per binding, in order: the key as the footer shows it, then its tooltip."""
    lines: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        lines.extend(str(app.screen.query_one("#help-body", Static).render()).splitlines())

    app = drive(db, script)
    bindings = [b for b in PigeonApp.BINDINGS if isinstance(b, Binding)]
    assert len(bindings) == len(PigeonApp.BINDINGS) == 27
    assert all(b.tooltip for b in bindings)
    assert [line.split(maxsplit=1) for line in lines] == [
        [app.get_key_display(b), b.tooltip] for b in bindings
    ]


def manual_key_rows(title: str) -> list[list[str]]:
    """The cells of the key table under ``title`` in docs/reference/tui-keys.md, code
    spans unwrapped (``"`esc`, `q`"`` becomes ``"esc, q"``)."""
    table = section(page("reference/tui-keys.md"), title)
    rows = [ln.strip("|").split(" | ") for ln in table.splitlines() if ln.startswith("| ")]
    return [[re.sub(r"``? ?(.*?) ?``?", r"\1", c.strip()) for c in row] for row in rows[1:]]


def test_the_manual_s_key_table_is_the_main_screen_s_bindings() -> None:
    """docs/reference/tui-keys.md lists every key of the main screen, in order, as the
    help screen shows it, with the footer's word (or "-" when the footer hides it)."""
    app: App[None] = App()
    expected = [
        [key, b.description if b.show else "-", does]
        for (key, does), b in zip(help_keys(app), KEYS, strict=True)
    ]
    assert manual_key_rows("The main screen") == expected
    assert ["o", "Owed", "who owes whom a reply: outstanding obligations"] in expected


@pytest.mark.parametrize(
    ("msg_id", "offered"),
    [
        ("msg_q1", {"n", "x", "X"}),  # queued direct: retry-now, cancel, cancel its target
        ("msg_c", set()),  # a channel message: fanned out to its members, nothing to do
        ("msg_f", {"u", "U"}),  # failed: requeue, requeue its target
        ("msg_d", set()),  # delivered: nothing
    ],
)
def test_the_footer_offers_only_the_actions_the_row_allows(
    db: Path, msg_id: str, offered: set[str]
) -> None:
    """Row actions the highlighted row's state does not allow are dimmed in the footer."""
    enabled: dict[str, bool] = {}

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await on_row(app, pilot, msg_id)
        enabled.update({k: app.active_bindings[k].enabled for k in ROW_KEYS})

    drive(db, script)
    assert {key for key, on in enabled.items() if on} == offered


@pytest.mark.parametrize(
    ("msg_id", "key", "notice"),
    [
        ("msg_d", "u", "requeue: msg_d is handed_off, not failed or expired"),
        ("msg_d", "x", "cancel: msg_d is handed_off, not queued"),
        ("msg_f", "n", "retry-now: msg_f is failed, not queued"),
        ("msg_q1", "U", "requeue: msg_q1 is queued, not failed or expired"),
        ("msg_c", "X", "cancel: msg_c is fanned_out, not queued"),
    ],
)
def test_a_key_the_row_does_not_allow_only_says_why(
    db: Path, msg_id: str, key: str, notice: str
) -> None:
    """No question is asked and nothing is written; a one-line notice says why."""
    before = all_rows(db)

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await on_row(app, pilot, msg_id)
        await pilot.press(key)
        await settle(app, pilot)
        assert not isinstance(app.screen, ConfirmScreen)

    app = drive(db, script)
    assert app.reports[-1] == notice
    assert all_rows(db) == before


def test_answering_no_is_not_taken_for_a_row_action(db: Path) -> None:
    """``n`` (No) in the question for a failed row neither writes nor says "retry-now"."""
    before = all_rows(db)

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await on_row(app, pilot, "msg_f")
        await pilot.press("u")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(app, pilot)
        assert not isinstance(app.screen, ConfirmScreen)

    app = drive(db, script)
    assert app.reports == []
    assert all_rows(db) == before


def test_a_bulk_action_with_nothing_listed_it_applies_to_asks_nothing(db: Path) -> None:
    """``R`` on the queued tab (no failed or expired message listed): a notice, no question."""

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("R")
        await settle(app, pilot)
        assert not isinstance(app.screen, ConfirmScreen)

    app = drive(db, script)
    assert app.reports[-1] == "requeue: no listed message is failed or expired"


def test_the_question_names_what_the_target_action_changes(db: Path) -> None:
    """``U`` on a failed row asks about the failed or expired messages to its target."""
    questions: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await on_row(app, pilot, "msg_f")
        await pilot.press("U")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        questions.append(app.screen.question)
        await pilot.press("n")

    drive(db, script)
    assert questions == ["requeue every failed or expired message to ses_b?"]
