"""Owed replies between agents in the real opencode 1.18.33, through pigeond's plugin.

A's model asks B with ``task.assign`` (which expects a reply).  Met: B's model answers
with ``swarm_send`` and ``reply_to``, and nothing is owed any more.  Not met (B's model
only says "ACK"): after ``--reply-within-s`` B's transcript gets exactly one
``reply.reminder``, and after the same time again A's gets exactly one ``reply.overdue``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S
from tests.e2e.agents import Agent, start_pigeond, wait_until

REPLY_WITHIN_S = 3


@pytest.fixture
def agents(opencode_with_plugin: OpencodeServer, fake_llm: FakeLLM) -> tuple[Agent, Agent]:
    server = opencode_with_plugin
    return Agent(server, fake_llm, "dirA", "asker"), Agent(server, fake_llm, "dirB", "worker")


def ask(a: Agent, b: Agent) -> str:
    """A's model sends B a task; its msg_id, once B's transcript has it."""
    part = a.call(
        "swarm_send", {"to": b.id, "payload": "Review PR 7\nthen report", "kind": "task.assign"}
    )
    assert part["state"]["status"] == "completed", part["state"]
    msg_id: str = part["state"]["output"].split()[1]
    wait_until(lambda: [e for e, _ in b.envelopes() if e["msg_id"] == msg_id], "the task at B")
    return msg_id


def owed(daemon: DaemonProcess, session: str) -> dict[str, list[dict[str, object]]]:
    status, body = daemon.request_json("GET", f"/swarm/owed?session={session}")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def kinds_from_pigeond(agent: Agent, kind: str) -> list[dict[str, str]]:
    return [e for e, _ in agent.envelopes() if e["from"] == "pigeond" and e["kind"] == kind]


def test_a_reply_with_reply_to_clears_what_is_owed(
    agents: tuple[Agent, Agent], daemons: DaemonFactory, tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """B owes A a reply until B's swarm_send names the task in reply_to."""
    a, b = agents
    daemon = start_pigeond(daemons, tmp_path, a.server, plugin_pigeond_port)
    msg_id = ask(a, b)
    assert [o["msg_id"] for o in owed(daemon, b.id)["owes"]] == [msg_id]
    assert [o["msg_id"] for o in owed(daemon, a.id)["owed"]] == [msg_id]
    b.server.wait_idle(b.id, b.directory, timeout_s=PATIENCE_S)
    part = b.call("swarm_send", {"to": a.id, "payload": "PR 7 looks good", "reply_to": msg_id})
    assert part["state"]["status"] == "completed", part["state"]
    assert owed(daemon, b.id)["owes"] == [] and owed(daemon, a.id)["owed"] == []


def test_an_unmet_reply_reminds_the_target_once_then_tells_the_sender_once(
    agents: tuple[Agent, Agent], daemons: DaemonFactory, tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """One reply.reminder in B's transcript quoting the task, then one reply.overdue in A's."""
    a, b = agents
    extra = ("--reply-within-s", str(REPLY_WITHIN_S))
    daemon = start_pigeond(daemons, tmp_path, a.server, plugin_pigeond_port, extra)
    msg_id = ask(a, b)
    [reminder] = wait_until(lambda: kinds_from_pigeond(b, "reply.reminder"), "the reminder")
    assert (reminder["reply_to"], reminder["to"]) == (msg_id, b.id)
    [overdue] = wait_until(lambda: kinds_from_pigeond(a, "reply.overdue"), "the overdue notice")
    assert (overdue["reply_to"], overdue["to"]) == (msg_id, a.id)
    # the obligations' schedule is wall time: a second reminder or notice, were one due,
    # would be queued within REPLY_WITHIN_S of the last, and is seen in the log at once
    time.sleep(2 * REPLY_WITHIN_S)
    swept = re.findall(r"owed replies: (\d+) reminded, (\d+) overdue", daemon.output())
    assert [(int(r), int(o)) for r, o in swept] == [(1, 0), (0, 1)], swept
    assert len(kinds_from_pigeond(b, "reply.reminder")) == 1
    assert len(kinds_from_pigeond(a, "reply.overdue")) == 1
    [still] = owed(daemon, b.id)["owes"]
    assert (still["msg_id"], still["state"]) == (msg_id, "overdue")
    [text] = [t for e, t in b.envelopes() if e["kind"] == "reply.reminder"]
    assert msg_id in text and "Review PR 7" in text
