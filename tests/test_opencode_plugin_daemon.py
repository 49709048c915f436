"""pigeond's opencode plugin against a real pigeond (no opencode: messages stay queued).

The stubbed tests (test_opencode_plugin.py) pin the tools' rules; these check
that what the plugin sends is what the daemon accepts, over TCP and a Unix socket.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess
from tests.plugin_runner import SESSION, run_tool

pytestmark = pytest.mark.slow
TARGET = "ses_targetBBBB"


@pytest.fixture
def daemon(daemons: DaemonFactory, tmp_path: Path) -> DaemonProcess:
    return daemons.start(tmp_path / "p.db", opencode_url="")


def tcp_env(daemon: DaemonProcess) -> dict[str, str]:
    """The plugin's environment for a TCP daemon: its URL and its token file."""
    return {"PIGEOND_URL": daemon.base_url, "PIGEOND_TOKEN_FILE": str(daemon.token_file)}


def stored(daemon: DaemonProcess) -> list[tuple[str, str, str | None, str]]:
    return [(m.msg_id, m.from_session, m.to_session, m.state) for m in daemon.stored_messages()]


def test_send_is_stored_by_the_daemon(daemon: DaemonProcess) -> None:
    """The daemon accepts the plugin's body; the row names the calling session."""
    env = tcp_env(daemon)
    run = run_tool("swarm_send", {"to": TARGET, "payload": "hi"}, replies=None, env=env)
    assert run.ok, run.error
    [(msg_id, sender, target, state)] = stored(daemon)
    assert (sender, target, state) == (SESSION, TARGET, "queued")
    unchecked = " (opencode could not be asked whether the session exists; it waits in the queue)"
    assert run.output == f"sent {msg_id} to {TARGET}: queued{unchecked}"  # delivery is off


def test_the_same_call_twice_is_one_message(daemon: DaemonProcess) -> None:
    """A repeated tool call is idempotent at the daemon: one row, the same answer."""
    env = tcp_env(daemon)
    args = {"to": TARGET, "payload": "once", "priority": "urgent"}
    first = run_tool("swarm_send", args, replies=None, env=env, call_id="call_same")
    again = run_tool("swarm_send", args, replies=None, env=env, call_id="call_same")
    assert first.ok and again.ok and first.output == again.output
    assert len(stored(daemon)) == 1


def test_status_of_a_sent_message(daemon: DaemonProcess) -> None:
    """swarm_status reads the daemon's GET /swarm/message/<msg_id>."""
    env = tcp_env(daemon)
    run_tool("swarm_send", {"to": TARGET, "payload": "hi"}, replies=None, env=env)
    [(msg_id, *_)] = stored(daemon)
    run = run_tool("swarm_status", {"msg_id": msg_id}, replies=None, env=env)
    assert run.output is not None
    # no opencode to read the sender's transcript in (delivery off): not verified
    shown = rf"{msg_id} to {TARGET}: queued; sender (pending|unverified); thread thr_\w+"
    assert re.fullmatch(shown, run.output)
    missing = run_tool("swarm_status", {"msg_id": "msg_nothere"}, replies=None, env=env)
    assert missing.error == "swarm_status: pigeond has no message msg_nothere"


def test_status_of_a_channel_message_follows_each_copy(daemon: DaemonProcess) -> None:
    """swarm_status of a message sent to a channel lists the copy of each other member as
    GET /swarm/message/<msg_id> does: its msg_id, state and receipt."""
    env = tcp_env(daemon)
    daemon.join_in_database("ops", SESSION, TARGET)
    sent = run_tool("swarm_send", {"channel": "ops", "payload": "standup"}, replies=None, env=env)
    assert sent.ok, sent.error
    [(msg_id, *_)] = [row for row in stored(daemon) if row[2] is None]
    [(copy_id, *_)] = [row for row in stored(daemon) if row[2] == TARGET]
    run = run_tool("swarm_status", {"msg_id": msg_id}, replies=None, env=env)
    assert run.output == (
        f"{msg_id} on channel ops: fanned_out, a copy to each of 1 member:\n"
        f"- {TARGET}: queued, receipt accepted (copy {copy_id})\n"
        "(swarm_status with a copy's msg_id shows its attempts, times and last error)"
    )


def test_empty_inbox_from_the_daemon(daemon: DaemonProcess) -> None:
    """swarm_read asks for the calling session's inbox, which the daemon answers."""
    run = run_tool("swarm_read", {}, replies=None, env=tcp_env(daemon))
    assert run.output == "no messages"


def test_daemon_refusal_is_quoted(daemon: DaemonProcess) -> None:
    """A cursor the daemon does not know comes back in its own words."""
    env = tcp_env(daemon)
    run = run_tool("swarm_read", {"since": "cur_99"}, replies=None, env=env)
    assert run.error == "swarm_read: pigeond refused it (HTTP 400): unknown cursor 'cur_99'"


def test_send_over_a_unix_socket(daemons: DaemonFactory, tmp_path: Path) -> None:
    """PIGEOND_URL=unix:/path reaches a daemon listening on that socket."""
    sock = tmp_path / "pigeond.sock"
    daemon = daemons.start(tmp_path / "u.db", opencode_url="", listen=f"unix:{sock}")
    env = {"PIGEOND_URL": f"unix:{sock}"}
    run = run_tool("swarm_send", {"to": TARGET, "payload": "hi"}, replies=None, env=env)
    assert run.ok, run.error
    assert [row[2] for row in stored(daemon)] == [TARGET]


def test_missing_unix_socket_is_unreachable(tmp_path: Path) -> None:
    """No socket file: the read fails with a plain reason."""
    env = {"PIGEOND_URL": f"unix:{tmp_path / 'absent.sock'}"}
    run = run_tool("swarm_status", {"msg_id": "msg_x"}, replies=None, env=env)
    assert run.error is not None and "pigeond is unreachable at unix:" in run.error
