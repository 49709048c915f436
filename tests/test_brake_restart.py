"""A message a brake holds survives a restart of the real daemon: still held, still listed,
never expired, and a person can release it afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.daemon_process import DaemonFactory

pytestmark = pytest.mark.slow
A, B = "ses_aaaa", "ses_bbbb"
HOPS = ["--max-hops-per-thread", "1", "--default-ttl-s", "1"]


def test_a_held_message_survives_a_restart(daemons: DaemonFactory, tmp_path: Path) -> None:
    """Held before a restart (with a 1 s ttl), it is held after it, and releases then."""
    db = tmp_path / "p.db"
    daemon = daemons.start(db, opencode_url="", extra_args=HOPS)
    status, first = daemon.request_json("POST", "/swarm/send", {"from": A, "to": B, "payload": "1"})
    assert status == 202
    reply = {"from": B, "to": A, "payload": "2", "reply_to": first["msg_id"]}
    status, held = daemon.request_json("POST", "/swarm/send", reply)
    assert status == 202 and held["held"]["brake"] == "hops"
    assert daemon.stop() == 0

    again = daemons.start(db, opencode_url="", extra_args=HOPS)
    status, listed = again.request_json("GET", "/swarm/held")
    assert status == 200 and [h["msg_id"] for h in listed["held"]] == [held["msg_id"]]
    status, shown = again.request_json("GET", f"/swarm/message/{held['msg_id']}")
    assert (shown["state"], shown["hold"]["kind"], shown["thread"]) == (
        "queued", "brake", first["thread"],
    )  # fmt: skip
    status, released = again.request_json("POST", f"/swarm/held/{held['msg_id']}/release", {})
    assert (status, released["released"]) == (200, True)
    _, after = again.request_json("GET", f"/swarm/message/{held['msg_id']}")
    assert (after["state"], after["hold"], after["expires_at"] is not None) == (
        "queued",
        None,
        True,
    )
