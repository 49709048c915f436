"""A pigeond process reading an opencode 2.x's event stream (``GET /api/event``) as a hint:
the 2.x stand-in (:mod:`testkit.opencode_v2_standin`) on 127.0.0.1, over real HTTP.

A session going idle makes pigeond look at its transcript at once; the receipt still
comes from the transcript, and without the stream (the stand-in drops every reader)
answers come by the reads every ``verify_interval_s``."""

from __future__ import annotations

from typing import Any

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.opencode_v2_standin import OpencodeV2StandIn
from testkit.polling import PATIENCE_S, wait_until
from tests.test_opencode_v2_daemon import PASSWORD, send, standin, start, stored

LONG_INTERVAL_S = "600"  # ten times the patience of a wait: only the hint explains a look


def permissions(daemon: DaemonProcess) -> list[dict[str, Any]]:
    status, answer = daemon.request_json("GET", "/swarm/permissions")
    assert status == 200, answer
    listed: list[dict[str, Any]] = answer["permissions"]
    return listed


def reading(daemon: DaemonProcess, server: OpencodeV2StandIn) -> None:
    """Wait until the daemon reads the stand-in's event stream: a first send makes it find
    the 2.x (its answer is not waited for here)."""
    send(daemon, "ses_nobody", "msg_0")
    wait_until(lambda: server.events.readers(), PATIENCE_S, "pigeond reading /api/event")


def test_an_answer_is_recorded_when_its_turn_ends_not_an_interval_later(
    daemons: DaemonFactory,
) -> None:
    """With verify_interval_s far longer than the wait, a hand-off seen while its turn runs
    is recorded answered soon after the stand-in's turn ends: the session's
    ``session.idle`` made pigeond read its transcript at once."""
    with standin() as (server, session):
        daemon = start(daemons, server, PASSWORD, "--verify-interval-s", LONG_INTERVAL_S)
        reading(daemon, server)
        with session.turns_held():
            send(daemon, session.id, "msg_1")
            wait_until(lambda: stored(daemon, "msg_1").receipt() == "seen", PATIENCE_S, "seen")
        wait_until(lambda: stored(daemon, "msg_1").receipt() == "answered", PATIENCE_S, "answer")
        assert stored(daemon, "msg_1").answer_message_id == session.messages[-1]["id"]


def test_without_the_stream_answers_still_come_by_reads(daemons: DaemonFactory) -> None:
    """A stand-in that drops every reader at its first event (the stream is volatile): the
    hint never comes, and the message is seen and answered by the transcript reads."""
    server = OpencodeV2StandIn(PASSWORD, step_s=0.01, event_capacity=0)
    with server.serve():
        session = server.create_session()
        daemon = start(daemons, server, PASSWORD)
        reading(daemon, server)
        send(daemon, session.id, "msg_1")  # its admission's event drops the reader
        wait_until(lambda: stored(daemon, "msg_1").receipt() == "answered", PATIENCE_S, "answer")


def test_a_request_still_listed_once_its_session_idles_is_stale(daemons: DaemonFactory) -> None:
    """A request asked in a turn that then ends (aborted) while the 2.x still lists it is
    closed as stale once the stream says the session went idle, and never answered."""
    with standin() as (server, session):
        daemon = start(daemons, server)
        reading(daemon, server)
        with session.turns_held():
            send(daemon, session.id, "msg_1")
            wait_until(lambda: session.running, PATIENCE_S, "the message's turn")
            request_id = server.ask_permission(session, "bash", ["rm -rf build"], "call_1")
            wait_until(lambda: permissions(daemon), PATIENCE_S, "the request listed")
        wait_until(lambda: permissions(daemon) == [], PATIENCE_S, "the stale request closed")
        assert request_id in server.permissions  # the 2.x lists it still
        assert server.permission_replies == []
