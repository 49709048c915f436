"""Snapshots of pigeon-tui's main screens, clock frozen and database path fixed.

Update after an intended change of the screens with
``.venv/bin/python -m pytest tests/test_tui_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from pigeond.storage import SwarmRepository, open_database
from pigeond_tui.app import PigeonApp
from tests.permission_helpers import permission_request
from tests.tui_support import LATER, seed, seed_addressing, seed_held, seed_real
from tests.tui_support import settle as settle_app

SIZE = (140, 36)
SnapCompare = Callable[..., bool]


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PigeonApp:
    """The app on the seeded database, opened by a relative path so the title is stable."""
    seed(tmp_path / "pigeond.db")
    monkeypatch.chdir(tmp_path)
    return PigeonApp("pigeond.db", clock=lambda: LATER, interval=3600)


async def settle(pilot: Pilot[None]) -> None:
    assert isinstance(pilot.app, PigeonApp)
    await settle_app(pilot.app, pilot)


def test_overview_and_queued_tab(app: PigeonApp, snap_compare: SnapCompare) -> None:
    """The first screen: counts, queued and failed per target, the queued messages."""
    assert snap_compare(app, terminal_size=SIZE, run_before=settle)


def test_failed_tab_with_detail(app: PigeonApp, snap_compare: SnapCompare) -> None:
    """The failed tab with the failed message's every column, last_error and envelope."""

    async def failed(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=failed)


def test_help_screen(app: PigeonApp, snap_compare: SnapCompare) -> None:
    """The help screen lists every key binding."""

    async def help_open(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=help_open)


def test_all_tab_at_200_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snap_compare: SnapCompare
) -> None:
    """The all tab at 200 columns, real-length ids and a long error: every column shows,
    age and last_error included, beside the detail pane."""
    seed_real(tmp_path / "real.db")
    monkeypatch.chdir(tmp_path)
    app = PigeonApp("real.db", clock=lambda: LATER, interval=3600)

    async def all_tab(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("6")
        await settle(pilot)

    assert snap_compare(app, terminal_size=(200, 40), run_before=all_tab)


def test_names_and_channels_screen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snap_compare: SnapCompare
) -> None:
    """``c``: the names, the channels, and the members of the second channel (the cursor
    moved down to it)."""
    seed_addressing(tmp_path / "pigeond.db")
    monkeypatch.chdir(tmp_path)
    app = PigeonApp("pigeond.db", clock=lambda: LATER, interval=3600)

    async def channels(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        await pilot.press("down")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=channels)


def test_waiting_screen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snap_compare: SnapCompare
) -> None:
    """The waiting view: each permission request, what it asks, the message it handles."""
    path = seed(tmp_path / "pigeond.db")
    repo = SwarmRepository(open_database(path))
    repo.record_permission(permission_request(asked_at=LATER - 120_000))
    repo.record_permission(
        permission_request("per_two", msg_id="msg_two", command="cargo test", asked_at=LATER)
    )
    repo.close()
    monkeypatch.chdir(tmp_path)
    app = PigeonApp("pigeond.db", clock=lambda: LATER, interval=3600)

    async def waiting(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("w")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=waiting)


def test_held_screen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snap_compare: SnapCompare
) -> None:
    """The held view: the held message, its brake and reason, its thread's cost so far."""
    seed_held(tmp_path / "pigeond.db")
    monkeypatch.chdir(tmp_path)
    app = PigeonApp("pigeond.db", clock=lambda: LATER, interval=3600)

    async def held(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=held)


def test_threads_screen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snap_compare: SnapCompare
) -> None:
    """The threads view: the thread's hops, turns, messages, held, tokens and cost."""
    seed_held(tmp_path / "pigeond.db")
    monkeypatch.chdir(tmp_path)
    app = PigeonApp("pigeond.db", clock=lambda: LATER, interval=3600)

    async def threads(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("t")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=threads)
