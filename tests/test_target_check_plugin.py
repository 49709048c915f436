"""The plugin's ``swarm_send`` on a target refused at send (404) and on a send that could
not be checked (``target_checked: false``), run in opencode's own runtime."""

from __future__ import annotations

import pytest

from tests.plugin_runner import run_tool

pytestmark = pytest.mark.slow  # each runs the opencode binary (installed with npm once)

TARGET = "ses_targetBBBB"
NO_SESSION = f"no session {TARGET} in opencode at http://127.0.0.1:4096"


def state_reply() -> dict[str, object]:
    return {"status": 200, "body": {"msg_id": "msg_x", "to": TARGET, "state": "queued"}}


def accepted(checked: bool) -> dict[str, object]:
    body = {"accepted": True, "msg_id": "msg_x", "target_checked": checked}
    return {"status": 202, "body": body}


def test_an_unknown_target_is_a_tool_error_saying_nothing_was_sent() -> None:
    """A 404 from pigeond: the model is told plainly the message was not sent, and why."""
    run = run_tool(
        "swarm_send", {"to": TARGET, "payload": "x"},
        replies=[{"status": 404, "body": {"error": NO_SESSION}}],
    )  # fmt: skip
    assert run.error == (
        f"swarm_send: the message was NOT sent: {NO_SESSION}. Check the session id (a typo,"
        " or a session that was deleted); nothing was queued."
    )
    assert len(run.posts) == 1


def test_an_unchecked_send_says_opencode_could_not_be_asked() -> None:
    """target_checked false: sent, and the model learns the target was not confirmed."""
    run = run_tool(
        "swarm_send", {"to": TARGET, "payload": "x"}, replies=[accepted(False), state_reply()]
    )
    assert run.output is not None and run.output.endswith(
        f"to {TARGET}: queued (opencode could not be asked whether the session exists;"
        " it waits in the queue)"
    )


def test_a_checked_send_says_nothing_more() -> None:
    """target_checked true: the usual one line."""
    run = run_tool(
        "swarm_send", {"to": TARGET, "payload": "x"}, replies=[accepted(True), state_reply()]
    )
    assert run.output is not None and run.output.endswith(f"to {TARGET}: queued")
