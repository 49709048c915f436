"""Which API pigeond speaks to its opencode: 1.x's until 1.x's routes are found missing,
2.x's once ``GET /api/health`` then names a 2.x, and again 1.x's the moment a 1.x answers.
A daemon on a Clock, its opencode :mod:`tests.opencode_v2_standin` in memory, replaced
while pigeond runs (``mode``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import LogLevel

from pigeond.delivery.failures import FailureKind
from pigeond.delivery.opencode_dialect import V2Exchange
from pigeond.delivery.opencode_errors import OpencodeError
from pigeond.delivery.opencode_v2_client import OpencodeV2Client
from pigeond.delivery.opencode_v2_runtime import OpencodeV2Runtime
from pigeond.delivery.runtime import Prepared
from pigeond.service.daemon import Daemon
from tests.api_dialect_helpers import OUTAGE_RETRY_S, build, health, held, send
from tests.conftest import LogCapture
from tests.http_helpers import failure_of, result_of
from tests.opencode_v2_standin import OpencodeV2StandIn
from tests.test_opencode_client import FakeOpencodeResource, client_for

V1_PROMPT = ("POST", "/session/ses_known/prompt_async")
V2_PROMPT = ("POST", "/api/session/ses_known/prompt")


def prompts_since(standin: OpencodeV2StandIn, start: int) -> list[tuple[str, str]]:
    return [r for r in standin.seen[start:] if r in (V1_PROMPT, V2_PROMPT)]


@pytest.mark.parametrize("delivery", ["call", "turn"])
def test_a_2x_is_handed_off_through_its_queue(tmp_path: Path, clock: Clock, delivery: str) -> None:
    """A message to a 2.x: checked at send, admitted once, queued, naming no agent or
    model, and seen in its transcript."""
    standin = OpencodeV2StandIn(mode="2.x")
    daemon = build(tmp_path, clock, standin, delivery=delivery)
    assert send(daemon, "msg_1")[1]["target_checked"] is True
    clock.advance(1)
    [body] = standin.admitted
    assert body["delivery"] == "queue" and not {"agent", "agents", "model"} & set(body)
    assert held(daemon, "msg_1") == ("handed_off", 0, None)
    assert prompts_since(standin, 0) == [V2_PROMPT]
    clock.advance(OUTAGE_RETRY_S)
    assert daemon.arbiter is not None and daemon.arbiter.unrecorded() == []


def test_health_and_status_line_name_a_2x(tmp_path: Path, clock: Clock) -> None:
    """/health: opencode ok with its 2.x version, no sentence of an unsupported API, its
    own event stream (``/api/event``) connected; systemd's STATUS= line says opencode ok."""
    standin = OpencodeV2StandIn(mode="2.x")
    daemon = build(tmp_path, clock, standin, delivery="turn")
    send(daemon, "msg_1")
    answer = health(daemon)
    assert (answer["opencode"], answer["opencode_version"]) == ("ok", "2.3.0")
    answer = health(daemon)
    assert "opencode_problem" not in answer and answer["event_stream"] == "connected"
    line = result_of(Deferred.fromCoroutine(daemon.status_line()))
    assert line == "queued 0, failed 0, in flight 0, opencode ok"


def test_an_unknown_2x_session_is_refused_at_send(tmp_path: Path, clock: Clock) -> None:
    """As on a 1.x: 404 naming where pigeond looked, nothing admitted."""
    standin = OpencodeV2StandIn(mode="2.x")
    daemon = build(tmp_path, clock, standin)
    assert send(daemon, "msg_1", to="ses_unknown") == (
        404, {"error": "no session ses_unknown in opencode at http://127.0.0.1:4096"}
    )  # fmt: skip
    assert standin.admitted == []


def replaced(
    tmp_path: Path, clock: Clock, before: str, after: str
) -> tuple[OpencodeV2StandIn, Daemon, int]:
    """msg_1 delivered to an opencode in mode ``before``, which is then replaced by one in
    mode ``after``, and msg_2 sent and given time; how many requests came before."""
    standin = OpencodeV2StandIn(mode=before)
    daemon = build(tmp_path, clock, standin)
    send(daemon, "msg_1")
    clock.advance(1)
    standin.mode = after
    swapped = len(standin.seen)
    send(daemon, "msg_2")
    clock.advance(OUTAGE_RETRY_S)
    return standin, daemon, swapped


def test_a_1x_replaced_by_a_2x_is_spoken_to_as_a_2x(tmp_path: Path, clock: Clock) -> None:
    """The next hand-off after the swap finds 1.x's routes missing, asks the health, and
    goes to the 2.x's queue."""
    standin, daemon, _ = replaced(tmp_path, clock, "v1", "2.x")
    assert prompts_since(standin, 0) == [V1_PROMPT, V2_PROMPT]
    assert held(daemon, "msg_2")[0] == "handed_off"


def test_a_2x_replaced_by_a_1x_is_never_sent_a_2x_prompt(tmp_path: Path, clock: Clock) -> None:
    """Before each 2.x hand-off 1.x's route is asked first: a 1.x answering it takes the
    next message through prompt_async, and nothing more under /api/."""
    standin, daemon, swapped = replaced(tmp_path, clock, "2.x", "v1")
    assert prompts_since(standin, swapped) == [V1_PROMPT]
    assert [r for r in standin.seen[swapped:] if r[1].startswith("/api/")] == []
    assert "opencode_version" not in health(daemon)


def test_a_2x_replaced_by_neither_holds_with_the_sentence(tmp_path: Path, clock: Clock) -> None:
    """A server with neither API after a 2.x: the next message is held as before, with
    the sentence, and nothing more is admitted."""
    standin, daemon, _ = replaced(tmp_path, clock, "2.x", "404")
    state, attempts, error = held(daemon, "msg_2")
    assert (state, attempts) == ("queued", 0)
    assert error is not None and "does not support" in error
    assert len(standin.admitted) == 1


def test_the_1x_watchers_leave_a_2x_alone(
    tmp_path: Path, clock: Clock, log_capture: LogCapture
) -> None:
    """In turn delivery, ten minutes after a hand-off to a 2.x: nothing but its transcript,
    its session, its pending permission requests and its own event stream is read, each
    by its 2.x route (no 1.x event stream, turn or permission polls of 1.x routes), and
    nothing is logged as a warning or an error."""
    standin = OpencodeV2StandIn(mode="2.x")
    daemon = build(tmp_path, clock, standin, delivery="turn")
    send(daemon, "msg_1")
    clock.advance(1)
    handed_off = len(standin.seen)
    for _ in range(600):
        clock.advance(1)
    assert set(standin.seen[handed_off:]) <= {
        ("GET", "/api/session/ses_known/message"),
        ("GET", "/api/session/ses_known"),
        ("GET", "/api/permission/request"),
        ("GET", "/api/event"),
    }
    loud = [t for level, t in log_capture.events if level in (LogLevel.warn, LogLevel.error)]
    assert loud == []


class FoundV1:
    """A verdict that found a 1.x (another drain's call made it since a hand-off began)."""

    v2_version: str | None = None
    problem: str | None = None

    async def verdict(self) -> str | None:
        return None


def test_a_2x_call_is_never_sent_once_a_1x_is_found() -> None:
    """A 2.x prompt prepared while the server was 2.x, sent after the verdict found a 1.x:
    an outage for that call, and nothing reaches the server."""
    sent: list[str] = []

    async def call(
        method: str, path: str, headers: dict[str, str], body: bytes | None, _: float | None
    ) -> tuple[int, bytes]:
        sent.append(path)
        return 200, b'{"data": {}}'

    exchange = V2Exchange(call, FoundV1(), "http://127.0.0.1:4096")
    prompt = exchange.request("POST", "/api/session/ses_1/synthetic", {}, b"{}")
    error = failure_of(Deferred.fromCoroutine(prompt)).value
    assert isinstance(error, OpencodeError) and error.kind is FailureKind.OUTAGE
    assert sent == []


class Found2x(FoundV1):
    v2_version: str | None = "2.3.0"


def test_a_2x_wait_a_steer_ends_is_not_logged_as_run_out_or_failed(
    clock: Clock, logged: list[str]
) -> None:
    """The wait after a 2.x hand-off, cancelled (a steer goes into the turn), ends quietly:
    neither "still running" (a wait that ran out) nor "not known idle" (one that failed)."""
    opencode = client_for(FakeOpencodeResource(hang=True), clock)
    exchange = V2Exchange(opencode.exchange_bytes, Found2x(), "http://127.0.0.1:4096")
    runtime = OpencodeV2Runtime(OpencodeV2Client(exchange, clock, 30), turn_timeout_s=lambda: 600)
    waiting = Deferred.fromCoroutine(runtime.after_hand_off("ses_a", Prepared(False, None)))
    waiting.cancel()
    assert result_of(waiting) is None
    assert [line for line in logged if "after its hand-off" in line] == []
