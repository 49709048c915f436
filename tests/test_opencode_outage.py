"""A daemon through an outage of opencode, on a Clock: delivery waits without spending
attempts or filling the log, asks opencode at a bounded rate, resumes within 2 s of its
return, and ``/health`` says it is unreachable, since when and why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import LogLevel

from pigeond.config import DEFAULTS, Config
from pigeond.delivery.reachability import IDLE_PROBE_BACKOFF_S, JITTER, PROBE_BACKOFF_S
from pigeond.service.daemon import Daemon
from tests.http_helpers import daemon_call, result_of
from tests.openapi_check import check_body
from tests.opencode_stub import RecordingOpencode, SwitchableOpencode
from tests.storage_helpers import clock_daemon, repo_of

URL = "http://127.0.0.1:4096"
TEN_MINUTES_S = 600.0
STEP_S = 0.05
TICK_S = DEFAULTS.tick_ms / 1000
SEND = {"from": "ses_a", "to": "ses_t", "payload": "hi", "msg_id": "msg_1"}


def run_for(clock: Clock, seconds: float) -> None:
    """Let ``seconds`` pass in small steps, as a reactor would."""
    for _ in range(round(seconds / STEP_S)):
        clock.advance(STEP_S)


def daemon_with(
    tmp_path: Path, clock: Clock, opencode: SwitchableOpencode, delivery: str = "call"
) -> Daemon:
    config = Config(db=str(tmp_path / "p.db"), delivery=delivery, opencode_url=URL)
    daemon = clock_daemon(config, clock, http=opencode.as_http())
    daemon.start_delivery()
    return daemon


def health(daemon: Daemon) -> tuple[int, Any]:
    return daemon_call(daemon, "GET", "/health", token=False)


def state_of(daemon: Daemon, msg_id: str) -> str:
    stored = repo_of(daemon).get(msg_id)
    assert stored is not None
    return stored.state


@pytest.fixture
def opencode(tmp_path: Path) -> SwitchableOpencode:
    return SwitchableOpencode(RecordingOpencode(tmp_path))


def sent_during_an_outage(daemon: Daemon, opencode: SwitchableOpencode, clock: Clock) -> None:
    """opencode stops; a message is sent; ten minutes pass."""
    opencode.up = False
    assert daemon_call(daemon, "POST", "/swarm/send", SEND)[0] == 202
    run_for(clock, TEN_MINUTES_S)


def test_a_message_sent_during_an_outage_goes_within_two_seconds_of_the_return(
    tmp_path: Path, clock: Clock, opencode: SwitchableOpencode
) -> None:
    """Ten minutes down: the message waits, queued with no attempt spent and saying why, and
    is handed off at most 2 s after opencode answers again."""
    daemon = daemon_with(tmp_path, clock, opencode)
    sent_during_an_outage(daemon, opencode, clock)
    stored = repo_of(daemon).get("msg_1")
    assert stored is not None and (stored.state, stored.attempts) == ("queued", 0)
    assert stored.last_error == (
        "GET /session/ses_t: ConnectionRefusedError: Connection was refused by other side."
    )
    came_back = clock.seconds()
    opencode.up = True
    while state_of(daemon, "msg_1") == "queued":
        clock.advance(STEP_S)
        assert clock.seconds() - came_back <= max(PROBE_BACKOFF_S) + STEP_S
    assert state_of(daemon, "msg_1") == "handed_off"


def test_one_outage_is_two_log_lines(
    tmp_path: Path,
    clock: Clock,
    opencode: SwitchableOpencode,
    log_events: list[tuple[LogLevel, str]],
) -> None:
    """Beside the message's own story, a ten-minute outage logs its start (warn) and its end
    (info, with how long it lasted), and nothing else."""
    daemon = daemon_with(tmp_path, clock, opencode)
    log_events.clear()
    sent_during_an_outage(daemon, opencode, clock)
    opencode.up = True
    run_for(clock, 3)
    assert state_of(daemon, "msg_1") == "handed_off"
    said = [(level, text) for level, text in log_events if level >= LogLevel.info]
    about_outage = [(level, text) for level, text in said if "msg_1" not in text]
    assert [level for level, _ in about_outage] == [LogLevel.warn, LogLevel.info]
    assert about_outage[0][1].startswith(f"opencode at {URL} unreachable (GET /session/ses_t:")
    assert about_outage[1][1].startswith(f"opencode at {URL} answers again after 10 min ")


def test_a_ten_minute_outage_costs_a_bounded_number_of_attempts(
    tmp_path: Path, clock: Clock, opencode: SwitchableOpencode
) -> None:
    """With a hand-off awaiting verification and a message waiting, ten minutes down cost
    one probe every 2 s at most, the send's check, and the target's one try per
    outage_retry_s; the verifier reads nothing meanwhile."""
    daemon = daemon_with(tmp_path, clock, opencode)
    first = SEND | {"msg_id": "msg_0"}
    assert daemon_call(daemon, "POST", "/swarm/send", first)[0] == 202
    assert state_of(daemon, "msg_0") == "handed_off"  # the verifier will want its transcript
    sent_during_an_outage(daemon, opencode, clock)
    probes = len(PROBE_BACKOFF_S) + TEN_MINUTES_S / (max(PROBE_BACKOFF_S) * (1 - JITTER))
    tries = 1 + TEN_MINUTES_S / DEFAULTS.outage_retry_s
    assert TEN_MINUTES_S / max(PROBE_BACKOFF_S) <= opencode.refused <= 1 + probes + tries


def test_health_says_unreachable_since_when_and_why_once_the_stream_is_refused(
    tmp_path: Path, clock: Clock, opencode: SwitchableOpencode
) -> None:
    """opencode down from the start: the event stream's refused connection alone makes
    /health say unreachable, since that moment, with the error; the daemon serves (200)."""
    opencode.up = False
    started_ms = int(clock.seconds() * 1000)
    daemon = daemon_with(tmp_path, clock, opencode, delivery="turn")
    status, answer = health(daemon)
    assert (status, answer["ok"], answer["opencode"]) == (200, True, "unreachable")
    assert answer["opencode_unreachable_since"] == started_ms
    assert answer["opencode_error"] == (
        "GET /global/event: ConnectionRefusedError: Connection was refused by other side."
    )


def test_health_while_unreachable_is_answered_as_documented(
    tmp_path: Path, clock: Clock, opencode: SwitchableOpencode
) -> None:
    """The unreachable answer, with its two extra keys, matches the OpenAPI schema."""
    opencode.up = False
    daemon = daemon_with(tmp_path, clock, opencode, delivery="turn")
    status, answer = health(daemon)
    body = json.dumps(answer).encode()
    check_body("GET", "/health", status, {"content-type": "application/json"}, body)


def test_health_says_ok_again_without_the_outage_once_opencode_answers(
    tmp_path: Path, clock: Clock, opencode: SwitchableOpencode
) -> None:
    """After the return /health says ok, and neither since nor the error is left."""
    daemon = daemon_with(tmp_path, clock, opencode)
    sent_during_an_outage(daemon, opencode, clock)
    opencode.up = True
    run_for(clock, 3)
    _, answer = health(daemon)
    assert answer["opencode"] == "ok"
    assert "opencode_unreachable_since" not in answer and "opencode_error" not in answer


def test_the_status_line_says_opencode_is_unreachable(
    tmp_path: Path, clock: Clock, opencode: SwitchableOpencode
) -> None:
    """systemctl status's line names the outage while it lasts."""
    daemon = daemon_with(tmp_path, clock, opencode)
    sent_during_an_outage(daemon, opencode, clock)
    line = result_of(Deferred.fromCoroutine(daemon.status_line()))
    assert line == "queued 1, failed 0, in flight 0, opencode unreachable"


def idle_outage(tmp_path: Path, clock: Clock, opencode: SwitchableOpencode) -> Daemon:
    """opencode gone, nothing queued: a daemon in turn delivery (its event stream finds the
    outage), ten minutes on."""
    opencode.up = False
    daemon = daemon_with(tmp_path, clock, opencode, delivery="turn")
    run_for(clock, TEN_MINUTES_S)
    return daemon


def test_an_idle_daemon_asks_a_missing_opencode_every_30_s_at_most(
    tmp_path: Path, clock: Clock, opencode: SwitchableOpencode
) -> None:
    """Nothing queued: ten minutes without opencode cost a probe every 30 s at most (the
    event stream waits for the probe), not one every 2 s."""
    idle_outage(tmp_path, clock, opencode)
    slowest = max(IDLE_PROBE_BACKOFF_S) * (1 - JITTER)
    assert opencode.refused <= 1 + len(IDLE_PROBE_BACKOFF_S) + TEN_MINUTES_S / slowest


def test_an_idle_daemon_notices_the_return_of_opencode_within_30_s(
    tmp_path: Path, clock: Clock, opencode: SwitchableOpencode
) -> None:
    """Nothing queued, a long outage: opencode's return is seen within the idle pace."""
    daemon = idle_outage(tmp_path, clock, opencode)
    came_back = clock.seconds()
    opencode.up = True
    while health(daemon)[1]["opencode"] != "ok":
        clock.advance(STEP_S)
        assert clock.seconds() - came_back <= max(IDLE_PROBE_BACKOFF_S) + STEP_S


def test_a_message_sent_in_an_idle_outage_goes_within_a_tick_and_two_seconds_of_the_return(
    tmp_path: Path, clock: Clock, opencode: SwitchableOpencode
) -> None:
    """After ten idle minutes, a message sent (its own attempt refused) and opencode back
    right after: the probes are at their 2 s pace again from the next tick, so it goes
    within a tick and 2 s, as during any outage, never after the idle 30 s."""
    daemon = idle_outage(tmp_path, clock, opencode)
    assert daemon_call(daemon, "POST", "/swarm/send", SEND)[0] == 202
    sent = clock.seconds()
    opencode.up = True
    while state_of(daemon, "msg_1") == "queued":
        clock.advance(STEP_S)
        assert clock.seconds() - sent <= TICK_S + max(PROBE_BACKOFF_S) + STEP_S
    assert state_of(daemon, "msg_1") == "handed_off"
