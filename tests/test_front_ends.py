"""``pigeon`` and ``pigeon-tui`` share one operator vocabulary: the actions of
``pigeond.cli.actions`` and the presentation of ``pigeond.cli.presentation``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

import pigeond_tui
from pigeond.cli.actions import ACTIONS, Action
from pigeond.cli.pigeon import main as pigeon
from pigeond.model import NOTICE_KIND, State
from pigeond.storage import SwarmRepository
from pigeond.storage.operator import ActionOutcome
from pigeond_tui.app import PigeonApp
from testkit.messages import new_message
from tests.storage_helpers import accept_channel_alone
from tests.tui_support import HOUR, LATER, NOW, drive, highlight, seed, settle


def message_in(repo: SwarmRepository, state: State) -> str:
    """A fresh message to ses_t, brought into ``state`` the way the daemon or an operator does."""
    msg_id = f"msg_{state.value}"
    kind = NOTICE_KIND if state is State.DROPPED else "chat"  # a notice ends dropped, not failed
    to, channel = ("ses_t", None) if state is not State.FANNED_OUT else (None, "ops")
    message = new_message(to, msg_id=msg_id, sender="cron", kind=kind, channel=channel)
    if channel is None:
        repo.accept(message, NOW, NOW + HOUR)
    else:
        accept_channel_alone(repo, message, NOW, NOW + HOUR)
    if state in (State.QUEUED, State.FANNED_OUT):  # a channel message is fanned out at once
        pass
    elif state is State.HANDED_OFF:
        assert repo.mark_handed_off(msg_id, NOW + 1)
    elif state is State.FAILED:
        repo.record_failed_attempt(msg_id, "HTTP 500: boom", NOW + 1, None)
    elif state is State.EXPIRED:
        assert repo.expire_due(NOW + HOUR) == [msg_id]
    elif state is State.CANCELLED:
        assert repo.cancel(msg_id, NOW + 1) is ActionOutcome.CHANGED
    elif state is State.DROPPED:
        repo.record_failed_attempt(msg_id, "HTTP 404: no such session", NOW + 1, None)
    else:
        raise AssertionError(f"no recipe yet for a message in state {state}")
    stored = repo.get(msg_id)
    assert stored is not None and stored.state == state.value
    return msg_id


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("action", list(ACTIONS.values()), ids=list(ACTIONS))
def test_an_action_applies_exactly_where_the_storage_changes_the_message(
    repo: SwarmRepository, action: Action, state: State
) -> None:
    """applies_to(state), which the front ends ask before offering, says what the write does."""
    msg_id = message_in(repo, state)
    outcome = action.apply_one(repo, msg_id, LATER, None)
    assert (outcome is ActionOutcome.CHANGED) == action.applies_to(state.value)


def test_pigeon_show_and_the_tui_detail_pane_show_the_same_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every field line of ``pigeon show`` is a line of the detail pane, in the same order."""
    db = seed(tmp_path / "pigeond.db")
    assert pigeon(["show", "--db", str(db), "msg_f"], env={}, now_ms=LATER) == 0
    cli_fields = capsys.readouterr().out.split("\n\npayload:")[0].splitlines()
    shown: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("2")
        await settle(app, pilot)
        shown.append(str(app.query_one("#detail", Static).render()))

    drive(db, script)
    assert cli_fields[0].split() == ["msg_id", "msg_f"] and len(cli_fields) > 20
    assert shown[0].split("\n\npayload")[0].splitlines() == cli_fields


def test_pigeon_and_the_tui_refuse_a_wrong_state_in_the_same_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``pigeon requeue`` of a delivered message says on stderr what the TUI's notice says."""
    db = seed(tmp_path / "pigeond.db")
    assert pigeon(["requeue", "--db", str(db), "msg_d"], env={}, now_ms=LATER) == 1
    cli_error = capsys.readouterr().err

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("6")
        await settle(app, pilot)
        await highlight(app, pilot, "msg_d")
        await pilot.press("u")
        await pilot.pause()

    app = drive(db, script)
    assert cli_error == "pigeon: requeue: msg_d is handed_off, not failed or expired\n"
    assert cli_error == f"pigeon: {app.reports[-1]}\n"


def test_the_tui_takes_nothing_from_the_pigeon_command_module() -> None:
    """The TUI imports its formatters and actions from the shared modules, not from ``pigeon``."""
    imported: set[str] = set()
    for source in Path(pigeond_tui.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
    assert {"pigeond.cli.actions", "pigeond.cli.presentation"} <= imported
    assert "pigeond.cli.pigeon" not in imported
