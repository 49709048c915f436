"""Names between agents in the real opencode 1.18.33, through pigeond's plugin.

A's model claims ``reviewer`` with ``swarm_name``; B's model, named ``builder``, sends to
``@reviewer`` with ``swarm_send``, and A's transcript gets the envelope with both names.
Then A's session is replaced: opencode deletes it, a new session's model claims
``reviewer`` (free, since opencode no longer has A), and B's next send to ``@reviewer``
reaches the new session.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.daemon_process import DaemonFactory
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S
from tests.e2e.agents import Agent, start_pigeond, wait_until


@pytest.fixture
def agents(opencode_with_plugin: OpencodeServer, fake_llm: FakeLLM) -> tuple[Agent, Agent]:
    server = opencode_with_plugin
    return Agent(server, fake_llm, "dirA", "reviewer"), Agent(server, fake_llm, "dirB", "builder")


def claim(agent: Agent, name: str) -> str:
    """The agent's model calls swarm_name; what the tool returned."""
    part = agent.call("swarm_name", {"name": name})
    assert part["state"]["status"] == "completed", part["state"]
    return str(part["state"]["output"])


def send_to_name(sender: Agent, payload: str) -> str:
    """The sender's model sends ``payload`` to @reviewer; its msg_id."""
    part = sender.call("swarm_send", {"to": "@reviewer", "payload": payload})
    assert part["state"]["status"] == "completed", part["state"]
    return str(part["state"]["output"].split()[1])


def envelope_of(agent: Agent, msg_id: str) -> dict[str, str]:
    found = wait_until(
        lambda: [e for e, _ in agent.envelopes() if e["msg_id"] == msg_id],
        f"{msg_id} at {agent.id}",
    )
    return dict(found[0])


def test_a_message_to_a_name_reaches_its_holder_and_its_successor(
    agents: tuple[Agent, Agent], daemons: DaemonFactory, tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """to: "@reviewer" reaches A with to_name and from_name; after A is replaced, the session
    that claims reviewer next gets the next message."""
    a, b = agents
    start_pigeond(daemons, tmp_path, a.server, plugin_pigeond_port)
    assert claim(a, "reviewer").startswith("you are now reviewer")
    claim(b, "builder")
    first = send_to_name(b, "Review PR 7")
    envelope = envelope_of(a, first)
    assert (envelope["to"], envelope["to_name"]) == (a.id, "reviewer")
    assert (envelope["from"], envelope["from_name"]) == (b.id, "builder")

    a.server.wait_idle(a.id, a.directory, timeout_s=PATIENCE_S)
    deleted = a.server.request("DELETE", f"/session/{a.id}", directory=a.directory)
    assert deleted.status == 200, deleted.body
    successor = Agent(a.server, a.llm, "dirA", "reviewer again")
    assert claim(successor, "reviewer").startswith("you are now reviewer")
    b.server.wait_idle(b.id, b.directory, timeout_s=PATIENCE_S)
    second = send_to_name(b, "Review PR 8")
    envelope = envelope_of(successor, second)
    assert (envelope["to"], envelope["to_name"]) == (successor.id, "reviewer")
