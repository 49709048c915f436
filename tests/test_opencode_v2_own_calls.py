"""A pigeond process and an opencode 2.x session's own tool calls: the 2.x stand-in
(:mod:`testkit.opencode_v2_standin`) on 127.0.0.1, behind its password, its session's
model calling pigeond's tools as pigeond's 2.x plugin does (the request sent while the
call's tool part is ``running`` in the 2.x transcript, as
:meth:`~testkit.opencode_v2_session.StandInSession.tool_running` writes it).

The daemon reads the call in the session's 2.x transcript: a ``swarm_name`` of the
session's own is accepted, and its ``swarm_send`` is stored verified."""

from __future__ import annotations

from typing import Any

from pigeond.tool_calls import plugin_msg_id
from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.polling import PATIENCE_S, wait_until
from tests.opencode_v2_reads_helpers import person_prompt
from tests.test_opencode_v2_daemon import standin, start, stored


def claim(daemon: DaemonProcess, session: str, name: str, call_id: str) -> tuple[int, Any]:
    """What pigeond's plugin sends for ``swarm_name`` (over TCP: no person's terminal)."""
    body = {"name": name, "session": session, "call_id": call_id}
    return daemon.request_json("POST", "/swarm/names", body)


def test_a_2x_session_s_own_swarm_name_is_accepted(daemons: DaemonFactory) -> None:
    """The claim made while the session's swarm_name call runs is the session's own: 200;
    the same claim once the call has returned is not: 403."""
    with standin() as (server, session):
        daemon = start(daemons, server)
        with session.turns_held():
            person_prompt(session, "take the name reviewer")
            with session.tool_running("swarm_name", {"name": "reviewer"}) as call_id:
                status, answer = claim(daemon, session.id, "reviewer", call_id)
            late_status, late = claim(daemon, session.id, "reviewer", call_id)
        assert (status, answer["name"], answer["session"]) == (200, "reviewer", session.id)
        assert late_status == 403, late
        assert f"no swarm_name call {call_id} in flight" in late["error"]


def test_a_2x_session_s_send_is_stored_verified(daemons: DaemonFactory) -> None:
    """A send made by the session's swarm_send call (its msg_id derived from the call's
    id, as the plugin does) is found in its 2.x transcript: verified, then delivered."""
    with standin() as (server, session):
        target = server.create_session()
        daemon = start(daemons, server)
        arguments = {"to": target.id, "payload": "the tests pass", "channel": None}
        with session.turns_held():
            person_prompt(session, "tell the other session")
            with session.tool_running("swarm_send", arguments) as call_id:
                msg_id = plugin_msg_id(session.id, call_id)
                body = {"from": session.id, "to": target.id, "payload": "the tests pass",
                        "msg_id": msg_id}  # fmt: skip
                assert daemon.request_json("POST", "/swarm/send", body)[0] == 202
                wait_until(lambda: stored(daemon, msg_id).from_proof != "pending", PATIENCE_S,
                           "the sender proof")  # fmt: skip
        message = stored(daemon, msg_id)
        assert (message.from_proof, message.from_proof_call) == ("verified", call_id)
        wait_until(lambda: stored(daemon, msg_id).receipt() == "answered", PATIENCE_S, "answer")
