"""A pigeond process delivering to an opencode 2.x: the 2.x stand-in
(:mod:`testkit.opencode_v2_standin`) on 127.0.0.1, behind its password, over real HTTP.

The daemon recognises the 2.x itself (1.x's routes missing, then ``GET /api/health``),
admits each message once to the session's queue, and reads the receipt chain from the
2.x transcript, where the stand-in's echo model answers every input."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from pigeond.model import StoredMessage
from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.opencode_v2_session import StandInSession
from testkit.opencode_v2_standin import OpencodeV2StandIn
from testkit.polling import PATIENCE_S, holds_for, wait_until

PASSWORD = "stand-in-secret"
ARGS = ("--verify-interval-s", "0.1", "--outage-retry-s", "0.5", "--handoff-timeout-s", "5")
QUIET_S = 2.0  # how long a daemon with nothing to deliver is watched for requests


@contextlib.contextmanager
def standin(step_s: float = 0.01) -> Iterator[tuple[OpencodeV2StandIn, StandInSession]]:
    """The stand-in served on loopback, with one idle session whose turns take ``step_s``."""
    server = OpencodeV2StandIn(PASSWORD, step_s=step_s)
    with server.serve():
        yield server, server.create_session()


def start(
    daemons: DaemonFactory, server: OpencodeV2StandIn, password: str | None = PASSWORD,
    *args: str,
) -> DaemonProcess:  # fmt: skip
    return daemons.start(
        daemons.tmp_path / "p.db", opencode_url=server.url, opencode_password=password,
        extra_args=[*ARGS, *args],
    )  # fmt: skip


def send(daemon: DaemonProcess, to: str, msg_id: str) -> tuple[int, Any]:
    body = {"from": "ses_sender", "to": to, "payload": f"hello {msg_id}", "msg_id": msg_id}
    return daemon.request_json("POST", "/swarm/send", body)


def stored(daemon: DaemonProcess, msg_id: str) -> StoredMessage:
    return next(m for m in daemon.stored_messages() if m.msg_id == msg_id)


def health(daemon: DaemonProcess) -> Any:
    return daemon.request_json("GET", "/health")[1]


@pytest.mark.parametrize("delivery", ["call", "turn"])
def test_a_message_is_admitted_once_and_answered(daemons: DaemonFactory, delivery: str) -> None:
    """Sent, checked, admitted once to the queue with no agent or model, then seen and
    answered in the 2.x transcript."""
    with standin() as (server, session):
        daemon = start(daemons, server, PASSWORD, "--delivery", delivery)
        assert send(daemon, session.id, "msg_1")[1]["target_checked"] is True
        wait_until(lambda: stored(daemon, "msg_1").receipt() == "answered", PATIENCE_S, "answer")
        [admitted] = session.admitted.values()
        body = json.loads(admitted.body)
        assert 'msg_id="msg_1"' in admitted.text
        assert session.admission_requests == {admitted.id: 1}
        assert body["delivery"] == "queue" and not {"agent", "agents", "model"} & set(body)
        assert stored(daemon, "msg_1").answer_message_id == session.messages[-1]["id"]


def test_in_turn_delivery_the_next_batch_waits_for_the_turn_to_end(
    daemons: DaemonFactory,
) -> None:
    """A turn longer than handoff_timeout_s is waited out (up to turn_timeout_s): the
    second message is admitted only once the first one's turn has ended."""
    with standin(step_s=1.5) as (server, session):
        daemon = start(daemons, server, PASSWORD, "--delivery", "turn", "--handoff-timeout-s",
                       "0.5")  # fmt: skip
        send(daemon, session.id, "msg_1")
        send(daemon, session.id, "msg_2")
        wait_until(lambda: stored(daemon, "msg_2").receipt() == "answered", PATIENCE_S, "answer")
        first, second = sorted(session.admitted.values(), key=lambda i: i.seq)
        first_turn_ended = session.messages[1]["time"]["completed"]
        assert session.messages[0]["id"] == first.id
        assert second.created_ms >= first_turn_ended


def test_health_names_the_2x_and_no_unsupported_api(daemons: DaemonFactory) -> None:
    """/health: opencode ok, its 2.x version, no "does not support" sentence."""
    with standin() as (server, session):
        daemon = start(daemons, server)
        send(daemon, session.id, "msg_1")
        wait_until(lambda: stored(daemon, "msg_1").receipt() == "answered", PATIENCE_S, "answer")
        answer = health(daemon)
        assert (answer["opencode"], answer["opencode_version"]) == ("ok", "2.3.0")
        assert "opencode_problem" not in answer
        assert "does not support" not in daemon.output()


def test_an_unknown_session_is_refused_at_send(daemons: DaemonFactory) -> None:
    """A send to a session the 2.x does not have is a 404, as on a 1.x; nothing stored."""
    with standin() as (server, _):
        daemon = start(daemons, server)
        status, answer = send(daemon, "ses_nobody", "msg_1")
        assert (status, answer) == (
            404, {"error": f"no session ses_nobody in opencode at {server.url}"}
        )  # fmt: skip
        assert daemon.stored_messages() == []


def test_a_wrong_password_is_an_outage_said_plainly(daemons: DaemonFactory) -> None:
    """401: the message waits (queued, no attempt spent) under a sentence naming the
    password, /health says unreachable, and the daemon retries slowly, not in a storm."""
    with standin() as (server, session):
        daemon = start(daemons, server, "not-the-password")
        assert send(daemon, session.id, "msg_1")[0] == 202
        wait_until(lambda: stored(daemon, "msg_1").last_error, PATIENCE_S, "the held sentence")
        message = stored(daemon, "msg_1")
        assert (message.state, message.attempts) == ("queued", 0)
        assert "HTTP 401" in (message.last_error or "")
        assert "opencode_password_file" in (message.last_error or "")
        answer = health(daemon)
        assert answer["opencode"] == "unreachable" and "HTTP 401" in answer["opencode_error"]
        before = len(server.requests)
        holds_for(lambda: len(server.requests) - before < 20, QUIET_S, "few requests")
        assert "not-the-password" not in daemon.output()
        assert session.admission_requests == {}


def test_no_password_is_an_outage_said_plainly(daemons: DaemonFactory) -> None:
    """Without a password, as with a wrong one: held, no attempt, the sentence says what
    to set."""
    with standin() as (server, session):
        daemon = start(daemons, server, None)
        send(daemon, session.id, "msg_1")
        wait_until(lambda: stored(daemon, "msg_1").last_error, PATIENCE_S, "the held sentence")
        message = stored(daemon, "msg_1")
        assert (message.state, message.attempts) == ("queued", 0)
        assert "OPENCODE_SERVER_PASSWORD" in (message.last_error or "")


def test_a_daemon_with_nothing_to_deliver_leaves_a_2x_alone(daemons: DaemonFactory) -> None:
    """In turn delivery, once the 2.x is found, the 1.x watchers (event stream, turn and
    permission polls) ask it nothing more while nothing is sent."""
    with standin() as (server, session):
        daemon = start(daemons, server, PASSWORD, "--delivery", "turn")
        send(daemon, session.id, "msg_1")
        wait_until(lambda: stored(daemon, "msg_1").receipt() == "answered", PATIENCE_S, "answer")
        daemon.wait_idle()
        before = len(server.requests)
        holds_for(lambda: len(server.requests) == before, QUIET_S, "no request")
