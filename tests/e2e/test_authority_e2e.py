"""A session's own things in the real opencode 1.18.33 and 1.15.4 (pigeond/api/authority.py):
its name, its policy and its channels change through pigeond only by its own tool call,
which pigeond finds running in its transcript; another process saying it acts for the session
is refused (403), and nothing changes.

The other process is this test, over TCP, as a session's bash tool or a prompt-injected
agent's would be: it can write any session id in a request, but it cannot put a call in
another session's transcript.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from tests.e2e.agents import Agent, start_pigeond


@pytest.fixture(params=["opencode_with_plugin", "opencode_1_15_with_plugin"],
                ids=["opencode-1.18.33", "opencode-1.15.4"])  # fmt: skip
def agents(request: pytest.FixtureRequest, fake_llm: FakeLLM) -> tuple[Agent, Agent]:
    """A victim and an attacker session in one opencode with pigeond's plugin (each version)."""
    server = request.getfixturevalue(request.param)
    assert isinstance(server, OpencodeServer)
    return Agent(server, fake_llm, "dirA", "victim"), Agent(server, fake_llm, "dirB", "attacker")


@pytest.fixture
def daemon(
    daemons: DaemonFactory, tmp_path: Path, agents: tuple[Agent, Agent], plugin_pigeond_port: int
) -> DaemonProcess:
    return start_pigeond(daemons, tmp_path, agents[0].server, plugin_pigeond_port)


def completed(part: dict[str, Any]) -> str:
    assert part["state"]["status"] == "completed", part["state"]
    return str(part["state"]["output"])


def holder(daemon: DaemonProcess, name: str) -> str | None:
    status, listed = daemon.request_json("GET", "/swarm/names")
    assert status == 200, listed
    return next((e["session"] for e in listed["names"] if e["name"] == name), None)


def test_a_forced_claim_of_a_live_sessions_name_by_another_session_is_403(
    agents: tuple[Agent, Agent], daemon: DaemonProcess
) -> None:
    """The victim's own swarm_name takes reviewer; a forced claim of it for the attacker's
    session is refused, and the name stays the victim's."""
    victim, attacker = agents
    assert completed(victim.call("swarm_name", {"name": "reviewer"})).startswith(
        "you are now reviewer"
    )
    body = {"name": "reviewer", "session": attacker.id, "force": True}
    status, answer = daemon.request_json("POST", "/swarm/names", body)
    assert status == 403, answer
    assert answer["error"].startswith(f"only {attacker.id} itself may claim a name for it")
    assert holder(daemon, "reviewer") == victim.id


def test_a_policy_with_a_forged_by_is_403_and_the_sessions_own_call_sets_it(
    agents: tuple[Agent, Agent], daemon: DaemonProcess
) -> None:
    """PUT /swarm/policy/<victim> saying by the victim is refused; the victim's own
    swarm_policy call sets its policy, recorded as set by the victim."""
    victim, attacker = agents
    forged = {"policy": "refuse", "allow": [attacker.id], "by": victim.id}
    status, answer = daemon.request_json("PUT", f"/swarm/policy/{victim.id}", forged)
    assert status == 403, answer
    assert answer["error"].startswith(f"only {victim.id} itself may set its policy")
    status, policy = daemon.request_json("GET", f"/swarm/policy/{victim.id}")
    assert (policy["policy"], policy["allow"]) == ("accept", [])
    output = completed(victim.call("swarm_policy", {"policy": "hold", "allow": ["@lead"]}))
    assert output.startswith("your policy is now hold")
    status, policy = daemon.request_json("GET", f"/swarm/policy/{victim.id}")
    assert (policy["policy"], policy["allow"], policy["updated_by"]) == (
        "hold", ["@lead"], victim.id,
    )  # fmt: skip


def test_joining_another_session_to_a_channel_is_403_and_its_own_join_is_not(
    agents: tuple[Agent, Agent], daemon: DaemonProcess
) -> None:
    """A join of the victim by another process is refused; its own swarm_channel joins it."""
    victim, _ = agents
    path = "/swarm/channels/ops/members"
    status, answer = daemon.request_json("POST", path, {"session": victim.id})
    assert status == 403, answer
    output = completed(victim.call("swarm_channel", {"action": "join", "channel": "ops"}))
    assert output.startswith("you joined ops (1 member)")
    status, answer = daemon.request_json("DELETE", f"{path}/{victim.id}")
    assert status == 403, answer
