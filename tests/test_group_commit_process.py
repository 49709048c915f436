"""Group commit on a real pigeond under load: kill -9 loses no send that got its 202."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pigeond.storage import SwarmRepository
from pigeond.storage.operator import open_existing
from testkit.daemon_process import DaemonFactory, DaemonProcess

pytestmark = pytest.mark.slow

SENDERS = 8
SENDS_EACH = 150


def send_until_killed(daemon: DaemonProcess, sender: int, accepted: list[str]) -> None:
    """Send SENDS_EACH messages one after the other; note each msg_id answered 202.
    Stops at the first failure (the daemon was killed)."""
    for i in range(SENDS_EACH):
        msg_id = f"msg_s{sender}n{i}"
        body = {"from": f"ses_sender{sender}", "to": f"ses_target{i % 5}", "payload": "x" * 500,
                "msg_id": msg_id}  # fmt: skip
        try:
            status, _ = daemon.request_json("POST", "/swarm/send", body, timeout_s=10)
        except OSError:
            return
        if status != 202:
            return
        accepted.append(msg_id)


def test_kill_9_under_load_loses_no_202(daemons: DaemonFactory, tmp_path: Path) -> None:
    """With 8 senders sending at once (sends grouped into shared commits), a kill -9 in
    the middle leaves every message that got a 202 on disk after the restart."""
    db = tmp_path / "state" / "pigeond.db"
    daemon = daemons.start(
        db, opencode_url="",
        extra_args=["--sender-rate-per-s", "0", "--sender-burst", "0"],
    )  # fmt: skip
    accepted: list[list[str]] = [[] for _ in range(SENDERS)]
    threads = [
        threading.Thread(target=send_until_killed, args=(daemon, n, accepted[n]), daemon=True)
        for n in range(SENDERS)
    ]
    for thread in threads:
        thread.start()
    while sum(map(len, accepted)) < SENDERS * SENDS_EACH // 3:
        threads[0].join(timeout=0.01)  # wait, bounded by the senders' own end
        if not any(t.is_alive() for t in threads):
            break
    daemon.kill()
    for thread in threads:
        thread.join(timeout=15)
    got_202 = {msg_id for per_sender in accepted for msg_id in per_sender}
    assert len(got_202) >= SENDERS * SENDS_EACH // 3
    repo = SwarmRepository(open_existing(str(db)))  # opening recovers the WAL, as a start does
    try:
        stored = {m.msg_id for m in repo.list_messages(limit=SENDERS * SENDS_EACH)}
    finally:
        repo.close()
    assert got_202 <= stored, sorted(got_202 - stored)[:5]
