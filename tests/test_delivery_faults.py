"""Delivery under faults, from the outside: a pigeond subprocess, a fake opencode, and a
disk that fills up, a database file deleted under the daemon, a stop that cuts hand-offs
short.  Each prompt is an LLM turn, so what is counted is prompts per message."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess, isolated_env
from testkit.fake_opencode import FakeOpencode
from testkit.fault_helpers import TARGET, fill, prompts_per_message, send, states
from testkit.polling import PATIENCE_S, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def opencode(tmp_path: Path) -> Iterator[FakeOpencode]:
    with FakeOpencode(tmp_path / "opencode") as fake:
        fake.add_session(TARGET)
        yield fake


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, so the disk under the database can be filled (needs root, as in CI)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mount)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def health(daemon: DaemonProcess) -> tuple[int, dict[str, Any]]:
    """GET /health without a token, as a monitor asks; the status and JSON answer."""
    try:
        with urllib.request.urlopen(daemon.base_url + "/health", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def full_disk_met(daemon: DaemonProcess) -> bool:
    """Whether a hand-off met the full disk: the disk filled either before the hand-off's
    intent was written (nothing is sent) or after it (sent, and not recorded)."""
    output = daemon.output()
    return "paused: database write failed" in output or "could not record it" in output


def test_full_disk_does_not_repeat_prompts(
    small_disk: Path, daemons: DaemonFactory, opencode: FakeOpencode
) -> None:
    """With the database's disk full during delivery, each message reaches opencode at most
    once more than with a healthy disk; once space is freed the hand-offs are recorded."""
    daemon = daemons.start(small_disk / "pigeond.db", opencode_url=opencode.url)
    healthy_ids = [send(daemon)[1]["msg_id"] for _ in range(3)]
    wait_until(
        lambda: all(m.verified_at for m in daemon.stored_messages()), PATIENCE_S,
        "healthy hand-offs",
    )  # fmt: skip
    healthy = prompts_per_message(opencode)
    opencode.hold_s = 1.0
    full_ids = [send(daemon)[1]["msg_id"] for _ in range(3)]
    filler = fill(small_disk)  # while the first prompt is held
    wait_until(lambda: full_disk_met(daemon), PATIENCE_S, "a hand-off to meet the full disk")
    # nothing outside counts the arbiter's ticks, so the storm (a prompt every tick, as
    # measured before this fix) gets a window of wall time: 60 ticks of 50 ms
    time.sleep(3)
    assert send(daemon)[0] == 503
    during = prompts_per_message(opencode)
    filler.unlink()
    wait_until(
        lambda: set(states(daemon, full_ids).values()) == {"handed_off"}, PATIENCE_S,
        "late records",
    )  # fmt: skip
    after = prompts_per_message(opencode)
    # the disk fills either before the first one's intent is written (nothing is sent) or
    # after it (sent once, and its hand-off recorded late or at once, as the WAL has room)
    output = daemon.output()
    assert output.count("paused: database write failed") <= 1, "logged once, not every tick"
    assert [healthy[i] for i in healthy_ids] == [1, 1, 1]
    assert during[full_ids[0]] <= 1 and [during[i] for i in full_ids[1:]] == [0, 0]
    assert all(after[i] <= max(healthy.values()) + 1 for i in full_ids), after
    assert [after[i] for i in full_ids] == [1, 1, 1]


def test_deleted_database_is_refused_and_reported(
    tmp_path: Path, daemons: DaemonFactory, opencode: FakeOpencode
) -> None:
    """A second pigeond is refused even with ``<db>.lock`` deleted; deleting the database
    under the first one turns sends into 503s and /health into ok false, logged once."""
    db = tmp_path / "state" / "pigeond.db"
    daemon = daemons.start(db, opencode_url=opencode.url)
    assert send(daemon)[0] == 202
    Path(str(db) + ".lock").unlink()
    second = DaemonProcess(tmp_path, db, opencode_url=opencode.url)
    refused = subprocess.run(
        second.args, env=isolated_env(tmp_path / "home"), cwd=tmp_path,
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert refused.returncode == 1
    assert f"holds the database file {db} itself" in refused.stderr
    for name in ("pigeond.db", "pigeond.db-wal", "pigeond.db-shm"):
        (db.parent / name).unlink(missing_ok=True)
    problem = f"database file {db} was deleted (or moved away) while pigeond ran"
    assert send(daemon) == (503, {"error": f"{problem}; nothing stored; restart pigeond"})
    code, answer = health(daemon)
    assert (code, answer["ok"], answer["error"]) == (503, False, f"{problem}; restart pigeond")
    assert daemon.stop() == 0
    critical = [line for line in daemon.output().splitlines() if line.startswith("critical")]
    assert len(critical) == 1 and problem in critical[0]


def test_stop_past_the_timeout_is_clean(
    tmp_path: Path, daemons: DaemonFactory, opencode: FakeOpencode
) -> None:
    """SIGTERM while hand-offs run past --stop-timeout-s: exit 0, nothing critical, and the
    messages are still queued for the next start, which hands them off."""
    opencode.hold_s = PATIENCE_S  # held past the stop (the fake's own stop ends it)
    db = tmp_path / "state" / "pigeond.db"
    daemon = daemons.start(db, opencode_url=opencode.url, extra_args=["--stop-timeout-s", "0.5"])
    msg_id = send(daemon)[1]["msg_id"]
    wait_until(lambda: opencode.arrivals(TARGET), PATIENCE_S, "the prompt held by opencode")
    assert daemon.stop() == 0
    output = daemon.output()
    assert "critical" not in output and "Traceback" not in output, output
    assert "hand-offs still in flight after 0.5 s" in output
    assert states(daemon, [msg_id]) == {msg_id: "queued"}
    opencode.hold_s = 0.1
    again = daemons.start(db, opencode_url=opencode.url)
    wait_until(lambda: states(again, [msg_id])[msg_id] == "handed_off", PATIENCE_S, "delivery")
