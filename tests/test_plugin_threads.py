"""The plugin's swarm_send and swarm_status with threads and brake holds, in opencode's own
runtime (the daemon stubbed): a held send answers "held: <reason>", a thread is passed on."""

from __future__ import annotations

import re
from typing import Any

import pytest

from pigeond.model import THREAD_RE
from tests.plugin_runner import PLUGIN, run_tool

pytestmark = pytest.mark.slow  # each runs the opencode binary (installed with npm once)

TARGET = "ses_targetBBBB"
REASON = "thread thr_1 reached 12 hops without a person; a person must release it"


def held_answer(msg_id: str = "msg_x") -> dict[str, Any]:
    """The daemon's 202 to a send a brake holds."""
    body = {"accepted": True, "msg_id": msg_id, "thread": "thr_1", "target_checked": True,
            "held": {"brake": "hops", "reason": REASON}}  # fmt: skip
    return {"status": 202, "body": body}


def test_the_plugin_declares_pigeonds_thread_rule() -> None:
    """The plugin's THREAD_RE is pigeond.model's."""
    declared = re.search(r"const THREAD_RE = /(.*)/;", PLUGIN.read_text())
    assert declared is not None and declared.group(1) == THREAD_RE.pattern


def test_a_held_send_answers_held_with_its_reason() -> None:
    """The tool says "held: <reason>" and that resending will not help; no status is read."""
    run = run_tool("swarm_send", {"to": TARGET, "payload": "again"}, replies=[held_answer()])
    assert run.ok and run.output is not None, run.error
    assert run.output.startswith(f"held: {REASON} (")
    assert "sending it again will not help" in run.output
    assert len(run.posts) == 1


def test_a_thread_is_passed_on() -> None:
    """thread goes to the daemon as given; null leaves it to the daemon."""
    reply = {"status": 202, "body": {"accepted": True, "msg_id": "msg_x", "thread": "review:1"}}
    status = {"status": 200, "body": {"msg_id": "msg_x", "state": "queued"}}
    run = run_tool(
        "swarm_send", {"to": TARGET, "payload": "x", "thread": "review:1"}, replies=[reply, status]
    )
    assert run.ok and run.posts[0]["body"]["thread"] == "review:1"
    run = run_tool(
        "swarm_send", {"to": TARGET, "payload": "x", "thread": None}, replies=[reply, status]
    )
    assert run.ok and "thread" not in run.posts[0]["body"]


def test_an_invalid_thread_is_refused_before_sending() -> None:
    """A thread that is no id: the tool fails naming it, and nothing is posted."""
    run = run_tool("swarm_send", {"to": TARGET, "payload": "x", "thread": "a b"})
    assert not run.ok and "'thread'" in str(run.error) and run.posts == []


def test_status_shows_the_hold_and_the_thread() -> None:
    """swarm_status of a held message: held for a person with why, and its thread."""
    body = {"msg_id": "msg_x", "to": TARGET, "state": "queued", "attempts": 0,
            "last_error": REASON, "thread": "thr_1",
            "hold": {"kind": "brake", "brake": "hops", "reason": REASON}}  # fmt: skip
    run = run_tool("swarm_status", {"msg_id": "msg_x"}, replies=[{"status": 200, "body": body}])
    assert run.ok
    assert run.output == f"msg_x to {TARGET}: queued; held for a person: {REASON}; thread thr_1"
