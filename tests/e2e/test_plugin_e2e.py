"""Agents using pigeond's plugin tools inside the real opencode 1.18.33.

The fake model calls the tools (a ``CALL <tool>#<call id> <json>`` prompt, see
:mod:`testkit.tool_script`); what the tool returned is read from opencode's
transcript (the tool part) and from what opencode sent back to the model.
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from pathlib import Path

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from tests.e2e.agents import TOOL_TIMEOUT_S, Agent, start_pigeond, wait_until
from tests.e2e.conftest import PLUGIN_SEND_RETRY_S


@pytest.fixture
def agents(opencode_with_plugin: OpencodeServer, fake_llm: FakeLLM) -> tuple[Agent, Agent]:
    server = opencode_with_plugin
    return Agent(server, fake_llm, "dirA", "agent A"), Agent(server, fake_llm, "dirB", "agent B")


def stored_rows(daemon: DaemonProcess) -> list[tuple[str, str, str | None]]:
    return [(m.msg_id, m.from_session, m.to_session) for m in daemon.stored_messages()]


def test_swarm_send_reaches_the_target_as_the_calling_session(
    agents: tuple[Agent, Agent], daemons: DaemonFactory, tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """A's model calls swarm_send; B's transcript gets the envelope from A's real session id."""
    a, b = agents
    start_pigeond(daemons, tmp_path, a.server, plugin_pigeond_port)
    part = a.call(
        "swarm_send", {"to": b.id, "payload": "please review PR 12", "kind": "task.assign"}
    )
    assert part["state"]["status"] == "completed", part["state"]
    output = part["state"]["output"]
    match = re.fullmatch(rf"sent (msg_tool_[0-9a-f]{{32}}) to {b.id}: (queued|handed_off)", output)
    assert match, output
    [(attributes, text)] = wait_until(b.envelopes, "the envelope in B's transcript")
    assert attributes["from"] == a.id and attributes["to"] == b.id
    assert attributes["msg_id"] == match.group(1) and attributes["kind"] == "task.assign"
    assert "please review PR 12" in text
    offered = a.llm.completions(session=a.id)[0].tools
    assert {"swarm_send", "swarm_read", "swarm_status"} <= set(offered)


def test_swarm_read_returns_the_delivered_message(
    agents: tuple[Agent, Agent], daemons: DaemonFactory, tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """After a delivery, B's model calls swarm_read and the tool result holds the message."""
    a, b = agents
    start_pigeond(daemons, tmp_path, a.server, plugin_pigeond_port)
    sent = a.call("swarm_send", {"to": b.id, "payload": "the build is green"})
    msg_id = sent["state"]["output"].split()[1]
    wait_until(b.envelopes, "the envelope in B's transcript")
    b.server.wait_idle(b.id, b.directory, timeout_s=TOOL_TIMEOUT_S)
    part = b.call("swarm_read", {"since": None, "limit": None}, call_id="call_read_b")
    output = part["state"]["output"]
    assert part["state"]["status"] == "completed"
    assert output.startswith("1 message (limit 10):\n")
    assert f"--- {msg_id} · from {a.id} (verified) · chat · normal · " in output
    assert "\n> the build is green\n" in output
    assert output.endswith(
        'no more; next time call swarm_read with since="cur_1" for newer ones only'
    )
    assert b.model_saw("call_read_b") == output


def test_bad_arguments_are_a_tool_error_and_the_session_goes_on(
    agents: tuple[Agent, Agent], daemons: DaemonFactory, tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """A wrong argument comes back to the model as a tool error; the next prompt works."""
    a, _ = agents
    daemon = start_pigeond(daemons, tmp_path, a.server, plugin_pigeond_port)
    part = a.call("swarm_send", {"to": 5, "payload": "x"}, call_id="call_bad")
    assert part["state"]["status"] == "error"
    assert part["state"]["error"] == "swarm_send: 'to' must be a string, not 5"
    assert "swarm_send: 'to' must be a string, not 5" in a.model_saw("call_bad")
    assert stored_rows(daemon) == []
    assert a.server.prompt_async(a.id, None, "carry on") == 204
    wait_until(
        lambda: any(c.last_user_text == "carry on" for c in a.llm.completions(session=a.id)),
        "the next turn",
    )
    a.server.wait_idle(a.id, a.directory, timeout_s=TOOL_TIMEOUT_S)
    assert a.server.assistant_texts(a.id)[-1].startswith("ACK ")


def test_unreachable_daemon_is_told_plainly(
    agents: tuple[Agent, Agent], plugin_pigeond_port: int
) -> None:
    """With pigeond stopped, swarm_send retries for its budget, then says nothing was sent."""
    a, b = agents
    part = a.call("swarm_send", {"to": b.id, "payload": "anyone there?"})
    state = part["state"]
    assert state["status"] == "error"
    error = state["error"]
    prefix = (
        "swarm_send: the message was NOT sent: pigeond is unreachable at "
        f"http://127.0.0.1:{plugin_pigeond_port} (connection refused; "
    )
    assert error.startswith(prefix), error
    tries = int(re.search(r"; (\d+) tries over ", error).group(1))  # type: ignore[union-attr]
    assert tries > 2
    assert state["time"]["end"] - state["time"]["start"] >= PLUGIN_SEND_RETRY_S * 1000
    assert b.envelopes() == []


def test_daemon_back_within_the_retry_window_gets_the_message_once(
    agents: tuple[Agent, Agent], daemons: DaemonFactory, tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """swarm_send keeps the same msg_id while it retries; a daemon that comes back gets it once."""
    a, b = agents
    call_id = "call_" + uuid.uuid4().hex[:20]
    a.start_call("swarm_send", {"to": b.id, "payload": "late"}, call_id)
    running = wait_until(lambda: a.tool_part(call_id, "running"), "the tool running")
    started_at_ms = time.time() * 1000
    daemon = start_pigeond(daemons, tmp_path, a.server, plugin_pigeond_port)
    part = a.finish_call(call_id)
    assert part["state"]["status"] == "completed", part["state"]
    assert running["state"]["time"]["start"] < started_at_ms  # its first tries were refused
    [(attributes, _)] = wait_until(b.envelopes, "the envelope in B's transcript")
    assert attributes["from"] == a.id
    assert [row[1:] for row in stored_rows(daemon)] == [(a.id, b.id)]


def test_the_same_tool_call_retried_gives_one_message(
    agents: tuple[Agent, Agent], daemons: DaemonFactory, tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """The model repeats a tool call with the same call id: one message, the same answer."""
    a, b = agents
    daemon = start_pigeond(daemons, tmp_path, a.server, plugin_pigeond_port)
    args = {"to": b.id, "payload": "exactly once", "priority": "urgent"}
    first = a.call("swarm_send", args, call_id="call_repeated")
    wait_until(b.envelopes, "the envelope in B's transcript")
    again = a.call("swarm_send", args, call_id="call_repeated")
    msg_id = first["state"]["output"].split()[1]
    assert again["state"]["status"] == "completed"
    assert again["state"]["output"].split()[1] == msg_id
    assert [row[0] for row in stored_rows(daemon)] == [msg_id]
    assert [attrs["msg_id"] for attrs, _ in b.envelopes()] == [msg_id]


def test_pigeon_send_in_the_agents_shell_sends_as_its_session(
    agents: tuple[Agent, Agent], daemons: DaemonFactory, tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """The plugin gives the agent's shell OPENCODE_SESSION_ID: pigeon-send there needs no --from."""
    a, b = agents
    start_pigeond(daemons, tmp_path, a.server, plugin_pigeond_port)
    pigeon_send = Path(sys.executable).parent / "pigeon-send"
    command = f"{pigeon_send} --wait --timeout 60 {b.id} 'sent from a shell'"
    part = a.call("bash", {"command": command, "description": "send a swarm message"})
    assert part["state"]["status"] == "completed", part["state"]
    assert re.match(r"msg_[A-Za-z0-9_-]+\n", part["state"]["output"]), part["state"]["output"]
    [(attributes, text)] = wait_until(b.envelopes, "the envelope in B's transcript")
    assert attributes["from"] == a.id and "sent from a shell" in text
