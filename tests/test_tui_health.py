"""pigeon-tui's header carries the daemon's word on opencode (``/health``'s
``opencode_problem``), e.g. an opencode whose API pigeond does not speak."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pigeond_tui.app import PigeonApp
from pigeond_tui.data import health_line
from testkit.stdlib_http import JsonHandler, serving
from tests.tui_support import LATER, seed, settle

SENTENCE = "opencode at http://127.0.0.1:4096 speaks an API pigeond does not support (2.x?)"


class _Health(JsonHandler):
    answer: ClassVar[dict[str, Any]] = {}

    def do_GET(self) -> None:
        self.send_json(200 if self.path == "/health" else 404, self.answer)


def serve(answer: dict[str, Any]) -> Iterator[str]:
    with serving(type("Health", (_Health,), {"answer": answer})) as url:
        yield url


@pytest.fixture
def troubled_daemon() -> Iterator[str]:
    yield from serve({"ok": True, "opencode": "unsupported", "opencode_problem": SENTENCE})


@pytest.fixture
def healthy_daemon() -> Iterator[str]:
    yield from serve({"ok": True, "opencode": "ok"})


def test_health_line_is_the_daemons_opencode_problem(troubled_daemon: str) -> None:
    """The daemon names a problem with opencode: that sentence."""
    assert health_line(troubled_daemon) == SENTENCE


def test_health_line_is_none_when_all_is_well(healthy_daemon: str) -> None:
    """Nothing wrong: no line."""
    assert health_line(healthy_daemon) is None


def test_health_line_is_none_without_a_daemon() -> None:
    """No daemon answering: no line (the TUI works from the database)."""
    assert health_line("http://127.0.0.1:9") is None


def test_the_header_shows_the_problem_beside_the_database(tmp_path: Path) -> None:
    """The header's subtitle: the database, then the daemon's word on opencode."""
    db = seed(tmp_path / "pigeond.db")
    app = PigeonApp(db, clock=lambda: LATER, interval=3600, health=lambda: SENTENCE)

    async def run() -> None:
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(app, pilot)
            assert app.sub_title == f"{db} · {SENTENCE}"

    asyncio.run(run())
