"""A channel between agents in the real opencode 1.18.33, through pigeond's plugin.

Three sessions' models join ``team.backend`` with ``swarm_channel``; a fourth session's
model sends the channel one message with ``swarm_send``.  Each member's transcript gets
the envelope exactly once, in a user message of its own (its own turn), with
``channel`` and ``to`` naming the channel and that member; pigeond verifies every copy
in its member's transcript, and the sender's transcript gets nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S
from tests.e2e.agents import Agent, start_pigeond, wait_until

TEAM = "team.backend"
MSG_ID = re.compile(r"\bmsg_[A-Za-z0-9_-]+")


@pytest.fixture
def agents(opencode_with_plugin: OpencodeServer, fake_llm: FakeLLM) -> list[Agent]:
    server = opencode_with_plugin
    places = (("dirA", "member one"), ("dirB", "member two"), ("dirA", "member three"))
    return [Agent(server, fake_llm, d, t) for d, t in (*places, ("dirB", "sender"))]


def join(agent: Agent) -> str:
    """The agent's model joins team.backend with swarm_channel; what the tool returned."""
    part = agent.call("swarm_channel", {"action": "join", "channel": TEAM})
    assert part["state"]["status"] == "completed", part["state"]
    agent.server.wait_idle(agent.id, agent.directory, timeout_s=PATIENCE_S)
    return str(part["state"]["output"])


def copies_seen(daemon: DaemonProcess, channel_msg_id: str) -> list[dict[str, object]]:
    """The channel message's copies, once every one is seen in its member's transcript."""
    status, stored = daemon.request_json("GET", f"/swarm/message/{channel_msg_id}")
    assert status == 200, stored
    deliveries = list(stored.get("deliveries") or [])
    done = deliveries and all(d["receipt"] in ("seen", "answered") for d in deliveries)
    return deliveries if done else []


def test_a_channel_message_reaches_each_member_once_and_is_verified(
    agents: list[Agent], daemons: DaemonFactory, tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """Three members each get one envelope (channel and to set) in a turn of their own,
    every copy is verified, and the sender gets none."""
    *members, sender = agents
    daemon = start_pigeond(daemons, tmp_path, sender.server, plugin_pigeond_port)
    for member in members:
        assert TEAM in join(member)
    part = sender.call("swarm_send", {"channel": TEAM, "payload": "standup in five"})
    assert part["state"]["status"] == "completed", part["state"]
    found = MSG_ID.search(str(part["state"]["output"]))
    assert found is not None, part["state"]["output"]
    channel_msg_id = found.group(0)

    deliveries = wait_until(lambda: copies_seen(daemon, channel_msg_id), "every copy seen")
    assert sorted(str(d["to"]) for d in deliveries) == sorted(m.id for m in members)
    for member in members:
        envelopes = [(e, text) for e, text in member.envelopes() if e.get("channel") == TEAM]
        assert len(envelopes) == 1, envelopes
        [(attributes, text)] = envelopes
        assert (attributes["to"], attributes["from"]) == (member.id, sender.id)
        assert text.count("standup in five") == 1 and text.count("<swarm_message ") == 1
    assert [e for e, _ in sender.envelopes() if e.get("channel") == TEAM] == []
