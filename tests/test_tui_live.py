"""pigeon-tui and a real pigeond on the same database file, both at work at once."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pigeond_tui.app import PigeonApp
from pigeond_tui.screens import ConfirmScreen
from tests.daemon_process import DaemonFactory, DaemonProcess
from tests.fake_opencode import FakeOpencode
from tests.tui_support import highlight, settle

pytestmark = pytest.mark.slow


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeOpencode]:
    with FakeOpencode(tmp_path / "opencode") as server:
        yield server


def send(daemon: DaemonProcess, to: str, payload: str) -> str:
    body = json.dumps({"from": "cli-user", "to": to, "payload": payload}).encode()
    request = urllib.request.Request(
        daemon.base_url + "/swarm/send", data=body, method="POST", headers=daemon.auth_headers
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return str(json.loads(response.read())["msg_id"])


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_requeue_in_the_tui_while_the_daemon_delivers(
    tmp_path: Path, fake: FakeOpencode, daemons: DaemonFactory
) -> None:
    """A message failed for a missing session is requeued in the TUI once the session
    exists again, and the running daemon delivers it; meanwhile the daemon keeps accepting
    and delivering other messages on the same file, and neither side sees a locked
    database.  (The session is there when the message is sent, as a send to a session
    opencode does not have is refused at once, and gone when it is handed off.)"""
    db = tmp_path / "p.db"
    fake.add_session("ses_busy")
    fake.add_session("ses_later")
    daemon = daemons.start(db, opencode_url=fake.url)
    first = send(daemon, "ses_later", "while it is there")  # pigeond now knows it exists
    wait_until(lambda: any(c.msg_id == first for c in fake.prompt_calls()), 10, "the first")
    fake.remove_session("ses_later")
    lost = send(daemon, "ses_later", "for a session that is gone for now")
    wait_until(lambda: "failed for good" in daemon.output(), 10, "the message to fail")
    fake.add_session("ses_later")

    async def run() -> PigeonApp:
        app = PigeonApp(db, interval=0.2)
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(app, pilot)
            await pilot.press("2")  # failed
            await settle(app, pilot)
            await highlight(app, pilot, lost)
            for n in range(20):  # the daemon writes while the TUI reads and writes
                await asyncio.to_thread(send, daemon, "ses_busy", f"busy {n}")
            await pilot.press("u")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("y")
            await settle(app, pilot)
            await pilot.pause(0.5)
        return app

    app = asyncio.run(run())
    assert f"{lost} requeued" in app.reports, app.reports
    wait_until(lambda: any(c.msg_id == lost for c in fake.prompt_calls()), 15, "the delivery")
    wait_until(lambda: len(fake.prompt_calls("ses_busy")) == 20, 15, "the busy deliveries")
    assert "locked" not in daemon.output()
    assert not any("locked" in r for r in app.reports), app.reports
