"""Against the real opencode: a send to a session id opencode does not have is refused at
once (404, and ``pigeon-send`` exits 1 saying so); with opencode down it is queued, and the
202 says ``target_checked: false``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from unittest.mock import ANY

from testkit.daemon_process import DaemonFactory
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S

UNKNOWN = "ses_0000nosuchsession0000"
PIGEON_SEND = Path(sys.executable).parent / "pigeon-send"


def test_unknown_target_is_refused_while_opencode_is_up(
    opencode_any: OpencodeServer, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """A session opencode has: 202, checked; one it does not have: 404 naming it, nothing
    stored; pigeon-send exits 1 with the daemon's line."""
    server = opencode_any
    session = server.create_session(server.dirs["dirA"], "target check")
    server.warm_up()
    server.get_session(session)
    # opencode answers in milliseconds, but on a loaded machine it has taken over the 3 s a
    # send waits by default; pigeon-send's own request waits 10 s
    daemon = daemons.start(
        tmp_path / "p.db", opencode_url=server.url, extra_args=["--target-check-wait-s", "8"]
    )
    body = {"from": "ses_sender", "payload": "hi"}
    accepted = daemon.request_json(
        "POST", "/swarm/send", body | {"to": session, "msg_id": "msg_ok"}
    )
    assert accepted == (
        202,
        {"accepted": True, "msg_id": "msg_ok", "thread": ANY, "target_checked": True},
    )
    refused = daemon.request_json("POST", "/swarm/send", body | {"to": UNKNOWN, "msg_id": "msg_no"})
    line = f"no session {UNKNOWN} in opencode at {server.url}"
    assert refused == (404, {"error": line})
    assert [m.msg_id for m in daemon.stored_messages()] == ["msg_ok"]
    cli = subprocess.run(
        [str(PIGEON_SEND), "--url", daemon.base_url, "--from", "ses_sender", UNKNOWN, "hi"],
        env={"PATH": os.environ.get("PATH", ""), "PIGEOND_TOKEN": daemon.token},
        capture_output=True, text=True, timeout=PATIENCE_S, check=False,
    )  # fmt: skip
    assert (cli.returncode, cli.stdout) == (1, "")
    assert line in cli.stderr


def test_unknown_target_is_queued_unchecked_while_opencode_is_down(
    opencode_1_18: OpencodeServer, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """opencode stopped: the same send is accepted and queued, target_checked false."""
    server = opencode_1_18
    daemon = daemons.start(tmp_path / "p.db", opencode_url=server.url)
    server.stop()
    try:
        body = {"from": "ses_sender", "to": UNKNOWN, "payload": "hi", "msg_id": "msg_down"}
        assert daemon.request_json("POST", "/swarm/send", body) == (
            202, {"accepted": True, "msg_id": "msg_down", "thread": ANY, "target_checked": False}
        )  # fmt: skip
        assert [(m.msg_id, m.state) for m in daemon.stored_messages()] == [("msg_down", "queued")]
    finally:
        server.start()
