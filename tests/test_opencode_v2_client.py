"""The calls to an opencode 2.x server (pigeond/delivery/opencode_v2_client.py), on a Clock."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.delivery.api_support import health_version
from pigeond.delivery.failures import FailureKind, HandOffError
from pigeond.delivery.opencode_errors import DeadlineExceeded
from pigeond.delivery.opencode_v2_client import OpencodeV2Client
from tests.http_helpers import failure_of, result_of

RECEIPT = json.dumps({"data": {"id": "msg_x", "admittedSeq": 1}}).encode()
NO_ROUTE = (404, b'"Not Found"')  # a server without /synthetic
SYNTHETIC, PROMPT = "/api/session/ses_t/synthetic", "/api/session/ses_t/prompt"


class ScriptedExchange:
    """Answers each call with the next scripted (status, body); None: never answers; an
    exception: raised (no answer)."""

    def __init__(self, *answers: tuple[int, bytes] | Exception | None) -> None:
        self._answers = list(answers)
        self.bodies: list[Any] = []
        self.paths: list[str] = []

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None = None
    ) -> tuple[int, bytes]:
        self.bodies.append(json.loads(body) if body else None)
        self.paths.append(path)
        answer = self._answers.pop(0)
        if answer is None:
            never: Deferred[tuple[int, bytes]] = Deferred()
            return await never
        if isinstance(answer, Exception):
            raise answer
        return answer


def admitted(client: OpencodeV2Client) -> Deferred[dict[str, Any]]:
    return Deferred.fromCoroutine(client.admit("ses_t", "msg_x", "hello"))


def test_the_flat_prompt_goes_first_and_the_nested_one_after_a_400() -> None:
    """A 400 to the flat body (nothing admitted) sends the nested one; the server's shape
    is remembered, so the next admission sends it straight away."""
    exchange = ScriptedExchange(NO_ROUTE, (400, b"{}"), (200, RECEIPT), (200, RECEIPT))
    client = OpencodeV2Client(exchange, Clock(), 5.0)
    receipts = [result_of(admitted(client)), result_of(admitted(client))]
    flat = {"id": "msg_x", "text": "hello", "delivery": "queue"}
    nested = {"id": "msg_x", "prompt": {"text": "hello"}, "delivery": "queue"}
    assert exchange.bodies == [flat, flat, nested, nested]
    assert [r["admittedSeq"] for r in receipts] == [1, 1]


def test_no_answer_in_time_may_have_been_admitted() -> None:
    """An admission unanswered within the deadline is DeadlineExceeded: it may have been
    admitted, so its messages are looked for in the transcript before a retry."""
    clock = Clock()
    client = OpencodeV2Client(ScriptedExchange(None), clock, 5.0)
    result = admitted(client)
    clock.advance(4.9)
    assert not result.called
    clock.advance(0.2)
    assert isinstance(failure_of(result).value, DeadlineExceeded)


def test_an_unexpected_status_is_an_attempt_and_401_an_outage() -> None:
    """A 500 spends an attempt; a 401 (no or a wrong password) is an outage."""
    for status, kind in ((500, FailureKind.ATTEMPT), (401, FailureKind.OUTAGE)):
        client = OpencodeV2Client(ScriptedExchange((status, b"{}")), Clock(), 5.0)
        error = failure_of(admitted(client)).value
        assert isinstance(error, HandOffError) and (error.status, error.kind) == (status, kind)


def test_only_a_healthy_2x_answer_names_a_version() -> None:
    """A 1.x web page, a 1.x version or an unhealthy answer is no 2.x server."""
    page = b"<!doctype html><html>"
    assert health_version(200, b'{"healthy": true, "version": "2.3.0", "pid": 1}') == "2.3.0"
    assert health_version(200, page) is None
    assert health_version(200, b'{"healthy": true, "version": "1.18.33"}') is None
    assert health_version(200, b'{"healthy": false, "version": "2.3.0"}') is None
    assert health_version(401, b"{}") is None


def test_synthetic_input_goes_where_the_server_has_the_route() -> None:
    """Every admission goes to ``/synthetic`` on a server that answered it, with its text
    and delivery flat; ``/prompt`` is never tried."""
    exchange = ScriptedExchange((200, RECEIPT), (200, RECEIPT))
    client = OpencodeV2Client(exchange, Clock(), 5.0)
    result_of(admitted(client))
    result_of(Deferred.fromCoroutine(client.admit("ses_t", "msg_y", "now", "steer")))
    assert exchange.paths == [SYNTHETIC, SYNTHETIC]
    assert exchange.bodies[1] == {"id": "msg_y", "text": "now", "delivery": "steer"}
    assert client.synthetic is True


def test_a_missing_synthetic_route_is_remembered_and_prompt_used() -> None:
    """A 404 that names no session (no such route: nothing admitted) sends the same input
    to ``/prompt``, and every later one straight there."""
    exchange = ScriptedExchange(NO_ROUTE, (200, RECEIPT), (200, RECEIPT))
    client = OpencodeV2Client(exchange, Clock(), 5.0)
    result_of(admitted(client))
    result_of(admitted(client))
    assert exchange.paths == [SYNTHETIC, PROMPT, PROMPT]
    assert client.synthetic is False


def test_a_405_or_a_web_page_on_synthetic_is_a_missing_route_too() -> None:
    """What the verdict calls a missing route (a 405, a web page) sends the input to
    ``/prompt`` as a 404 does."""
    for missing in ((405, b'"Method Not Allowed"'), (200, b"<!doctype html><html>")):
        exchange = ScriptedExchange(missing, (200, RECEIPT))
        client = OpencodeV2Client(exchange, Clock(), 5.0)
        result_of(admitted(client))
        assert (exchange.paths, client.synthetic) == ([SYNTHETIC, PROMPT], False)


def test_what_is_learnt_of_synthetic_is_forgotten_when_the_verdict_changes() -> None:
    """A server found missing ``/synthetic`` and then replaced (another 2.x version found)
    is asked ``/synthetic`` again."""
    found = ["2.2.0"]
    exchange = ScriptedExchange(NO_ROUTE, (200, RECEIPT), (200, RECEIPT))
    client = OpencodeV2Client(exchange, Clock(), 5.0, version=lambda: found[0])
    result_of(admitted(client))
    found[0] = "2.3.0"
    assert client.synthetic is None
    result_of(admitted(client))
    assert exchange.paths == [SYNTHETIC, PROMPT, SYNTHETIC]


def test_a_session_not_found_on_synthetic_is_no_missing_route() -> None:
    """``SessionNotFoundError`` from ``/synthetic`` fails the hand-off for good, and the
    server is known to have the route: nothing goes to ``/prompt``."""
    gone = (404, json.dumps({"_tag": "SessionNotFoundError", "sessionID": "ses_t"}).encode())
    exchange = ScriptedExchange(gone)
    client = OpencodeV2Client(exchange, Clock(), 5.0)
    error = failure_of(admitted(client)).value
    assert isinstance(error, HandOffError) and error.kind is FailureKind.PERMANENT
    assert (exchange.paths, client.synthetic) == ([SYNTHETIC], True)


def test_an_admission_unanswered_on_synthetic_is_retried_there() -> None:
    """No answer in time tells nothing of the route: the retry goes to ``/synthetic``
    again (where a server that has it re-admits the same input)."""
    clock = Clock()
    exchange = ScriptedExchange(None, (200, RECEIPT))
    client = OpencodeV2Client(exchange, clock, 5.0)
    first = admitted(client)
    clock.advance(6)
    assert isinstance(failure_of(first).value, DeadlineExceeded)
    result_of(admitted(client))
    assert exchange.paths == [SYNTHETIC, SYNTHETIC]
