"""An opencode with neither the v1 API nor a 2.x's (``GET /api/health`` answering no 2.x
version) is said plainly: every message is held as in an outage (no attempt spent,
nothing failed), one log line, and the sentence in /health, the status line and the TUI.
pigeond asks it nothing under ``/api/`` but that read, and a 1.x nothing at all there.
The stand-in answers other paths as a server without them does (see
:mod:`tests.opencode_v2_standin`)."""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import ANY

import pytest
import pytest_twisted
import treq
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.task import Clock
from twisted.logger import LogLevel
from twisted.web.server import Site

from pigeond.config import Config
from pigeond.service.wiring import build_daemon
from tests.api_dialect_helpers import OUTAGE_RETRY_S, URL, build, health, held, send
from tests.conftest import LogCapture
from tests.http_helpers import client_headers, result_of
from tests.opencode_v2_standin import MISSING_ROUTE_MODES, OpencodeV2StandIn
from tests.storage_helpers import inline_database, repo_of

SENTENCE = f"opencode at {URL} speaks an API pigeond does not support (2.x?)"


@pytest.fixture(params=MISSING_ROUTE_MODES)
def standin(request: pytest.FixtureRequest) -> OpencodeV2StandIn:
    return OpencodeV2StandIn(mode=request.param)


def test_a_send_is_accepted_unchecked_and_held_without_attempts(
    tmp_path: Path, clock: Clock, standin: OpencodeV2StandIn
) -> None:
    """The send is queued (target_checked false), and held with the sentence, no attempt."""
    daemon = build(tmp_path, clock, standin)
    assert send(daemon, "msg_1") == (
        202, {"accepted": True, "msg_id": "msg_1", "thread": ANY, "target_checked": False}
    )  # fmt: skip
    assert held(daemon, "msg_1") == ("queued", 0, SENTENCE)


def test_held_messages_never_fail(tmp_path: Path, clock: Clock, standin: OpencodeV2StandIn) -> None:
    """Retried every outage_retry_s, far past max_attempts' worth: still queued, no attempt."""
    daemon = build(tmp_path, clock, standin, max_attempts=2)
    send(daemon, "msg_1")
    for _ in range(10):
        clock.advance(OUTAGE_RETRY_S)
    assert held(daemon, "msg_1") == ("queued", 0, SENTENCE)
    assert repo_of(daemon).count_by_state() == {"queued": 1}


def test_nothing_but_health_is_asked_under_api(
    tmp_path: Path, clock: Clock, standin: OpencodeV2StandIn
) -> None:
    """Once v1 is found missing, GET /api/health is the one 2.x path asked (a read that
    acts on nothing): never another v2 request, least of all a v2 prompt."""
    daemon = build(tmp_path, clock, standin)
    send(daemon, "msg_1")
    clock.advance(OUTAGE_RETRY_S)
    assert standin.seen and set(standin.api_requests()) == {("GET", "/api/health")}


@pytest.mark.parametrize("delivery", ["call", "turn"])
def test_nothing_is_ever_sent_under_api_to_a_1x(
    tmp_path: Path, clock: Clock, delivery: str
) -> None:
    """A 1.x is recognised by its own routes: sends, hand-offs and retries ask it nothing
    under /api/, not even its health."""
    standin = OpencodeV2StandIn(mode="v1")
    daemon = build(tmp_path, clock, standin, delivery=delivery)
    for n in range(3):
        send(daemon, f"msg_{n}")
        clock.advance(OUTAGE_RETRY_S)
    assert ("POST", "/session/ses_known/prompt_async") in standin.seen
    assert standin.api_requests() == []


def test_health_says_it_plainly(tmp_path: Path, clock: Clock, standin: OpencodeV2StandIn) -> None:
    """/health: opencode "unsupported" and the sentence, as the OpenAPI document says."""
    daemon = build(tmp_path, clock, standin)
    send(daemon, "msg_1")
    answer = health(daemon)
    assert (answer["opencode"], answer["opencode_problem"]) == ("unsupported", SENTENCE)


def test_status_line_says_it_plainly(
    tmp_path: Path, clock: Clock, standin: OpencodeV2StandIn
) -> None:
    """systemd's STATUS= line carries the sentence in place of "opencode ok"."""
    daemon = build(tmp_path, clock, standin)
    send(daemon, "msg_1")
    line = result_of(Deferred.fromCoroutine(daemon.status_line()))
    assert line == f"queued 1, failed 0, in flight 0, {SENTENCE}"


def test_it_is_logged_once(
    tmp_path: Path, clock: Clock, standin: OpencodeV2StandIn, log_capture: LogCapture
) -> None:
    """One error line however many sends and retries meet it."""
    daemon = build(tmp_path, clock, standin)
    for n in range(3):
        send(daemon, f"msg_{n}")
        clock.advance(OUTAGE_RETRY_S)
    errors = [t for level, t in log_capture.events if level is LogLevel.error and SENTENCE in t]
    assert len(errors) == 1


def test_opencode_replaced_by_one_speaking_v1_resumes_delivery(
    tmp_path: Path, clock: Clock, standin: OpencodeV2StandIn
) -> None:
    """Once v1 answers again, the held message goes out and health is ok again."""
    daemon = build(tmp_path, clock, standin)
    send(daemon, "msg_1")
    standin.mode = "v1"
    clock.advance(OUTAGE_RETRY_S)
    assert held(daemon, "msg_1")[0] == "handed_off"
    answer = health(daemon)
    assert answer["opencode"] == "ok" and "opencode_problem" not in answer


def test_turn_delivery_finds_it_at_start_through_the_event_stream(
    tmp_path: Path, clock: Clock, standin: OpencodeV2StandIn
) -> None:
    """In turn delivery the event stream's GET /global/event finds it with no send at all."""
    daemon = build(tmp_path, clock, standin, delivery="turn")
    assert health(daemon)["opencode_problem"] == SENTENCE


@pytest_twisted.ensureDeferred
async def test_over_real_http_a_daemon_holds_messages_for_an_opencode_with_neither_api(
    tmp_path: Path,
) -> None:
    """Over real HTTP on 127.0.0.1 (pigeond's own HTTP client, a listening daemon): the send
    gets 202 unchecked, its message is held with the sentence, /health says it, and the
    stand-in saw nothing under /api/ but its health asked."""
    standin = OpencodeV2StandIn(mode="404")
    opencode_port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(
        Site(standin)
    )
    url = f"http://127.0.0.1:{opencode_port.getHost().port}"
    config = Config(
        db=str(tmp_path / "p.db"), delivery="call", opencode_url=url,
        listen="tcp:0:interface=127.0.0.1", runtime_socket="",
    )  # fmt: skip
    daemon = build_daemon(config, reactor, db=inline_database(tmp_path / "p.db"))
    try:
        port = await daemon.listen()
        base = f"http://127.0.0.1:{port.getHost().port}"  # type: ignore[attr-defined]
        daemon.start_delivery()
        body = {"from": "ses_sender", "to": "ses_known", "payload": "hi", "msg_id": "msg_1"}
        sent = await treq.post(
            base + "/swarm/send", json.dumps(body).encode(), headers=client_headers(daemon)
        )
        assert (sent.code, json.loads(await sent.content())) == (
            202, {"accepted": True, "msg_id": "msg_1", "thread": ANY, "target_checked": False}
        )  # fmt: skip
        assert daemon.arbiter is not None
        await daemon.arbiter.stop()  # fires once the hand-off under way has ended
        sentence = f"opencode at {url} speaks an API pigeond does not support (2.x?)"
        assert held(daemon, "msg_1") == ("queued", 0, sentence)
        answer = json.loads(await (await treq.get(base + "/health")).content())
        assert (answer["opencode"], answer["opencode_problem"]) == ("unsupported", sentence)
        assert set(standin.api_requests()) == {("GET", "/api/health")}
    finally:
        await daemon.stop()
        await opencode_port.stopListening()


def test_an_opencode_1x_is_never_probed(tmp_path: Path, clock: Clock) -> None:
    """opencode 1.x's own 404 for a session it lacks is believed as it is: no probe, no
    verdict, and the send is refused as an unknown target."""
    standin = OpencodeV2StandIn(mode="v1")
    daemon = build(tmp_path, clock, standin)
    assert send(daemon, "msg_1", to="ses_unknown")[0] == 404
    assert ("GET", "/session/status") not in standin.seen
    assert "opencode_problem" not in health(daemon)
