"""Each session's consent between agents in the real opencode 1.18.33, through pigeond's
plugin.

B's model sets ``hold`` with ``swarm_policy``; A's model sends B a message with
``swarm_send``: accepted, and waiting (queued, held, not in B's transcript).  B's model
sets ``accept``: the message arrives.  And once B's model sets ``refuse``, A's
``swarm_send`` fails at once with an error naming the policy.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testkit.daemon_process import DaemonFactory
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S
from tests.e2e.agents import Agent, start_pigeond, wait_until

# Nothing outside counts the arbiter's ticks, so a held message gets a window of wall
# time in which to be (wrongly) handed off: 40 ticks of the test daemons' 50 ms.
TICKS_S = 2.0


@pytest.fixture
def agents(opencode_with_plugin: OpencodeServer, fake_llm: FakeLLM) -> tuple[Agent, Agent]:
    server = opencode_with_plugin
    return Agent(server, fake_llm, "dirA", "sender"), Agent(server, fake_llm, "dirB", "holder")


def set_policy(agent: Agent, policy: str) -> str:
    """The agent's model calls swarm_policy; what the tool returned."""
    part = agent.call("swarm_policy", {"policy": policy})
    assert part["state"]["status"] == "completed", part["state"]
    agent.server.wait_idle(agent.id, agent.directory, timeout_s=PATIENCE_S)
    return str(part["state"]["output"])


def test_hold_keeps_a_message_back_until_accept_releases_it(
    agents: tuple[Agent, Agent], daemons: DaemonFactory, tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """Held: queued and not in B's transcript; B's accept brings it in."""
    a, b = agents
    daemon = start_pigeond(daemons, tmp_path, a.server, plugin_pigeond_port)
    assert set_policy(b, "hold").startswith("your policy is now hold")
    part = a.call("swarm_send", {"to": b.id, "payload": "wait for your go"})
    assert part["state"]["status"] == "completed", part["state"]
    msg_id = str(part["state"]["output"].split()[1])
    time.sleep(TICKS_S)
    status, stored = daemon.request_json("GET", f"/swarm/message/{msg_id}")
    assert status == 200 and stored["state"] == "queued", stored
    assert str(stored["last_error"]).startswith("held:")
    assert msg_id not in [e["msg_id"] for e, _ in b.envelopes()]
    assert "1 released" in set_policy(b, "accept")
    wait_until(lambda: [e for e, _ in b.envelopes() if e["msg_id"] == msg_id], "the message at B")


def test_refuse_makes_the_sender_s_swarm_send_fail_naming_the_policy(
    agents: tuple[Agent, Agent], daemons: DaemonFactory, tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """A's swarm_send to a refusing B is a tool error: not sent, B refuses, the policy."""
    a, b = agents
    start_pigeond(daemons, tmp_path, a.server, plugin_pigeond_port)
    set_policy(b, "refuse")
    part = a.call("swarm_send", {"to": b.id, "payload": "let me in"})
    assert part["state"]["status"] == "error", part["state"]
    assert part["state"]["error"].startswith(
        f"swarm_send: the message was NOT sent: {b.id} refuses messages from {a.id}:"
        " its inbound policy is refuse"
    )
