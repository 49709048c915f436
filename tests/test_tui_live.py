"""pigeon-tui and a real pigeond on the same database file, both at work at once."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from pigeond_tui.app import PigeonApp
from pigeond_tui.screens import ConfirmScreen
from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.fake_opencode import FakeOpencode
from testkit.polling import PATIENCE_S, wait_until
from tests.tui_support import highlight, table_keys

pytestmark = pytest.mark.slow


def send(daemon: DaemonProcess, to: str, payload: str) -> str:
    body = json.dumps({"from": "cli-user", "to": to, "payload": payload}).encode()
    request = urllib.request.Request(
        daemon.base_url + "/swarm/send", data=body, method="POST", headers=daemon.auth_headers
    )
    with urllib.request.urlopen(request, timeout=PATIENCE_S) as response:
        return str(json.loads(response.read())["msg_id"])


async def until(pilot: Pilot[None], check: Callable[[], object], what: str) -> None:
    """Let the app run until ``check()`` is true.  (Not "until its workers are done": its
    timer starts a read every 0.2 s, which cancels one still running, so on a busy machine
    there may never be a moment with none running, or none cancelled.)"""
    deadline = time.monotonic() + PATIENCE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out after {PATIENCE_S:g} s waiting for {what}"
        await pilot.pause(0.05)


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

    def delivered(msg_id: str) -> bool:
        return any(c.msg_id == msg_id for c in fake.prompt_calls())

    def busy_delivered() -> bool:
        return len(fake.prompt_calls("ses_busy")) == 20

    first = send(daemon, "ses_later", "while it is there")  # pigeond now knows it exists
    wait_until(lambda: delivered(first), PATIENCE_S, "the first")
    fake.remove_session("ses_later")
    lost = send(daemon, "ses_later", "for a session that is gone for now")
    wait_until(lambda: "failed for good" in daemon.output(), PATIENCE_S, "the message to fail")
    fake.add_session("ses_later")

    async def run() -> PigeonApp:
        app = PigeonApp(db, interval=0.2)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.press("2")  # failed
            await until(pilot, lambda: table_keys(app, "#messages") == [lost], "the failed tab")
            await highlight(app, pilot, lost)
            for n in range(20):  # the daemon writes while the TUI reads and writes
                await asyncio.to_thread(send, daemon, "ses_busy", f"busy {n}")
            await pilot.press("u")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
            await pilot.press("y")
            await until(pilot, lambda: any(lost in r for r in app.reports), "the requeue's report")
            # the TUI reads on while the daemon delivers the requeued and the busy ones
            await until(pilot, lambda: delivered(lost) and busy_delivered(), "the deliveries")
        return app

    app = asyncio.run(run())
    assert f"{lost} requeued" in app.reports, app.reports
    assert delivered(lost) and busy_delivered()
    assert "locked" not in daemon.output()
    assert not any("locked" in r for r in app.reports), app.reports
