"""A pigeond process and the permission requests of an opencode 2.x session handling a
swarm message: the 2.x stand-in (:mod:`testkit.opencode_v2_standin`) on 127.0.0.1, its
session's turn held while it asks, over real HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.polling import PATIENCE_S, wait_until
from tests.test_opencode_v2_daemon import send, standin, start


def permissions(daemon: DaemonProcess) -> list[dict[str, Any]]:
    status, answer = daemon.request_json("GET", "/swarm/permissions")
    assert status == 200, answer
    listed: list[dict[str, Any]] = answer["permissions"]
    return listed


@pytest.mark.parametrize("delivery", ["call", "turn"])
def test_a_2x_session_s_request_is_listed_and_answered(
    daemons: DaemonFactory, delivery: str
) -> None:
    """A request asked while the session handles a message is listed with that message and
    its sender; the operator's answer reaches the 2.x's reply route, and the list empties."""
    with standin() as (server, session):
        daemon = start(daemons, server, "stand-in-secret", "--delivery", delivery)
        with session.turns_held():
            send(daemon, session.id, "msg_1")
            wait_until(lambda: session.running, PATIENCE_S, "the message's turn")
            request_id = server.ask_permission(session, "bash", ["rm -rf build"], "call_1")
            wait_until(lambda: permissions(daemon), PATIENCE_S, "the request listed")
            [listed] = permissions(daemon)
            assert (listed["id"], listed["session"], listed["permission"]) == (
                request_id, session.id, "bash"
            )  # fmt: skip
            assert (listed["patterns"], listed["msg_id"], listed["from"]) == (
                ["rm -rf build"], "msg_1", "ses_sender"
            )  # fmt: skip
            reply = f"/swarm/permissions/{request_id}/reply"
            status, answer = daemon.request_json("POST", reply, {"answer": "once"})
        assert (status, answer["outcome"]) == (200, "answered"), answer
        assert server.permission_replies == [(request_id, "once")]
        assert permissions(daemon) == []


def test_a_request_of_a_session_handling_no_message_is_not_listed(
    daemons: DaemonFactory,
) -> None:
    """A session's own work (no swarm message handed off to it) is not pigeond's: its
    request is not listed, and not answered."""
    with standin() as (server, session):
        daemon = start(daemons, server)
        other = server.create_session()
        send(daemon, other.id, "msg_1")
        wait_until(lambda: other.turns, PATIENCE_S, "the other session's turn")
        server.ask_permission(session, "bash", ["ls"], "call_1")
        daemon.wait_idle()
        assert permissions(daemon) == []
        assert server.permission_replies == []
