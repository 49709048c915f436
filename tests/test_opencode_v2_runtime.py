"""The opencode 2.x runtime against the 2.x stand-in, over real HTTP on loopback."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.error import ConnectError
from twisted.internet.task import Clock
from twisted.web import server
from twisted.web.client import Agent

from pigeond.config import Config
from pigeond.credentials import BasicAuth
from pigeond.delivery.failures import FailureKind, HandOffError
from pigeond.delivery.http_exchange import HttpExchange
from pigeond.delivery.opencode_client import OpencodeClient
from pigeond.delivery.opencode_v2_client import AdmissionConflict, OpencodeV2Client
from pigeond.delivery.opencode_v2_runtime import (
    Admission,
    OpencodeV2Runtime,
    admission_id,
    joined,
)
from pigeond.delivery.opencode_v2_transcript import OpencodeV2Transcript
from pigeond.delivery.runtime import Delivery, Prepared
from pigeond.model import HandoffMode
from testkit.opencode_v2_session import StandInSession
from testkit.opencode_v2_standin import USER
from testkit.polling import PATIENCE_S, wait_until
from tests.http_helpers import failure_of, result_of
from tests.opencode_stub import RecordingOpencode
from tests.opencode_v2_calls import PASSWORD, prompt, running, wait_idle
from tests.test_opencode_v2_client import RECEIPT, ScriptedExchange

TEXTS = [
    '<swarm_message from="ses_a" msg_id="msg_1" priority="normal">first</swarm_message>',
    '<swarm_message from="ses_b" msg_id="msg_2" priority="urgent">second</swarm_message>',
]
TIMEOUT_S = 10.0
SESSION = "ses_t"


@contextlib.contextmanager
def runtime_at(
    url: str, password: str = PASSWORD
) -> Iterator[tuple[OpencodeV2Runtime, OpencodeV2Client]]:
    """The 2.x runtime (waiting for each turn) and its client, to the server at ``url``."""
    exchange = HttpExchange(reactor, url, auth=BasicAuth(USER, password))
    client = OpencodeV2Client(exchange, reactor, TIMEOUT_S)
    try:
        yield OpencodeV2Runtime(client, turn_timeout_s=lambda: TIMEOUT_S), client
    finally:
        exchange.close()


async def hand_off(runtime: OpencodeV2Runtime, session: StandInSession) -> Any:
    """One whole hand-off of TEXTS (prepare, hand off, wait for its turn); the receipt's seq."""
    prepared = await runtime.prepare(session.id)
    assert prepared is not None
    await runtime.hand_off(session.id, prepared, TEXTS)
    await runtime.after_hand_off(session.id, prepared)
    assert isinstance(prepared.detail, Admission)
    return prepared.detail.seq


@pytest.mark.parametrize("shape", ["flat", "nested"])
@pytest_twisted.ensureDeferred
async def test_a_hand_off_is_one_queued_input_naming_no_agent_or_model(shape: str) -> None:
    """On a server without ``/synthetic``, a batch is admitted once as a prompt, queued,
    under its derived id, with no agent or model, in whichever prompt shape the server
    takes; its turn has ended when the wait ends."""
    with (
        running(prompt_shape=shape, synthetic=False) as (url, session),
        runtime_at(url) as (
            runtime,
            _,
        ),
    ):
        await hand_off(runtime, session)
        admitted = session.admitted[admission_id(session.id, TEXTS)]
        assert (admitted.kind, admitted.text, admitted.delivery) == ("user", joined(TEXTS), "queue")
        assert not {"agent", "agents", "model"} & set(json.loads(admitted.body))
        assert [turn.input_ids for turn in session.turns] == [(admitted.id,)]


@pytest_twisted.ensureDeferred
async def test_a_retried_hand_off_gets_the_same_receipt_and_one_turn() -> None:
    """Handing off the same batch again re-admits the same input: same receipt, one turn."""
    with running() as (url, session), runtime_at(url) as (runtime, _):
        first = await hand_off(runtime, session)
        again = await hand_off(runtime, session)
        input_id = admission_id(session.id, TEXTS)
        assert (first, again) == (1, 1)
        assert session.admission_requests[input_id] == 2
        assert [turn.input_ids for turn in session.turns] == [(input_id,)]


def test_the_admission_id_comes_from_the_target_and_the_batchs_msg_ids() -> None:
    """The same batch gives the same id in any order; another batch or target another."""
    same = admission_id("ses_t", TEXTS)
    assert same == admission_id("ses_t", TEXTS[::-1])
    assert same.startswith("msg_")
    assert len({same, admission_id("ses_t", TEXTS[:1]), admission_id("ses_u", TEXTS)}) == 3


@pytest_twisted.ensureDeferred
async def test_a_conflicting_admission_holds_the_target_and_runs_nothing_more() -> None:
    """opencode holding another input under the batch's id is a 409: an outage (the
    target held, no attempt spent), and no turn runs for the batch."""
    with running() as (url, session), runtime_at(url) as (runtime, _):
        input_id = admission_id(session.id, TEXTS)
        prompt(url, session.id, "something else", id=input_id)
        wait_idle(url, session)
        prepared = await runtime.prepare(session.id)
        assert prepared is not None
        with pytest.raises(AdmissionConflict) as raised:
            await runtime.hand_off(session.id, prepared, TEXTS)
        assert (raised.value.status, raised.value.kind) == (409, FailureKind.OUTAGE)
        assert session.admitted[input_id].text == "something else"
        assert len(session.turns) == 1


@pytest_twisted.ensureDeferred
async def test_a_wrong_password_is_an_outage_and_admits_nothing() -> None:
    """Basic auth is sent: with a wrong password the server answers 401, an outage."""
    with running() as (url, session), runtime_at(url, "wrong") as (runtime, _):
        prepared = await runtime.prepare(session.id)
        assert prepared is not None
        with pytest.raises(HandOffError) as raised:
            await runtime.hand_off(session.id, prepared, TEXTS)
        assert (raised.value.status, raised.value.kind) == (401, FailureKind.OUTAGE)
        assert session.admission_requests == {}


@pytest_twisted.ensureDeferred
async def test_a_session_the_server_does_not_have_fails_at_once() -> None:
    """A hand-off to a session the 2.x server does not have is a permanent failure."""
    with running() as (url, session), runtime_at(url) as (runtime, _):
        prepared = await runtime.prepare("ses_gone")
        assert prepared is not None
        with pytest.raises(HandOffError) as raised:
            await runtime.hand_off("ses_gone", prepared, TEXTS)
        assert (raised.value.status, raised.value.kind) == (404, FailureKind.PERMANENT)
        assert session.admission_requests == {}


@pytest_twisted.ensureDeferred
async def test_stopping_cuts_the_wait_for_the_turn_short() -> None:
    """pigeond stopping ends the wait for a long turn at once; the input stays admitted."""
    with running(step_s=30) as (url, session), runtime_at(url) as (runtime, _):
        prepared = await runtime.prepare(session.id)
        assert prepared is not None
        await runtime.hand_off(session.id, prepared, TEXTS)
        started = reactor.seconds()
        waiting = Deferred.fromCoroutine(runtime.after_hand_off(session.id, prepared))
        reactor.callLater(0.2, runtime.stop)
        await waiting
        assert reactor.seconds() - started < 5
        assert list(session.admitted) == [admission_id(session.id, TEXTS)]


@contextlib.contextmanager
def recognising(url: str) -> Iterator[OpencodeClient]:
    """The 1.x client pigeond recognises an opencode with (its verdict: ``api``)."""
    auth = BasicAuth(USER, PASSWORD)
    exchange = HttpExchange(reactor, url, auth=auth)
    config = Config(handoff_timeout_s=TIMEOUT_S)
    try:
        yield OpencodeClient(HTTPClient(Agent(reactor)), url, reactor, config, auth=auth,
                             exchange=exchange)  # fmt: skip
    finally:
        exchange.close()


@pytest_twisted.ensureDeferred
async def test_a_2x_server_is_told_by_its_health() -> None:
    """A server without 1.x's routes whose ``GET /api/health`` names a 2.x is that 2.x."""
    with running() as (url, _), recognising(url) as client:
        await client.api.verdict()
        assert (client.api.v2_version or "").startswith("2.")


@contextlib.asynccontextmanager
async def served(resource: RecordingOpencode) -> AsyncIterator[str]:
    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(server.Site(resource))
    try:
        yield f"http://127.0.0.1:{port.getHost().port}"
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_a_1x_server_is_asked_no_v2_route(tmp_path: Path) -> None:
    """Telling a 1.x server sends it one read of 1.x's own route, with Basic auth, and
    nothing under ``/api/``: no 2.x there."""
    opencode = RecordingOpencode(tmp_path)
    async with served(opencode) as url:
        with recognising(url) as client:
            assert await client.api.verdict() is None
            assert client.api.v2_version is None
    auth = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert opencode.seen == [("/session/status", auth)]


@pytest_twisted.ensureDeferred
async def test_the_answer_is_found_in_the_transcript() -> None:
    """After the turn, the transcript shows each envelope's input, its answer and its turn."""
    with running() as (url, session), runtime_at(url) as (runtime, _):
        await hand_off(runtime, session)
        assert runtime.transcripts is not None
        view = await runtime.transcripts.read(session.id, None)
        input_id = admission_id(session.id, TEXTS)
        assert dict(view.homes) == {"msg_1": input_id, "msg_2": input_id}
        where = {"msg_1": input_id, "msg_2": input_id}
        answer = session.messages[-1]["id"]
        assert view.answers(where) == {"msg_1": answer, "msg_2": answer}
        assert [(t.key, t.msg_ids) for t in view.turns(where)] == [(input_id, ("msg_1", "msg_2"))]


@pytest_twisted.ensureDeferred
async def test_the_newest_messages_are_read_oldest_first() -> None:
    """A read of the newest messages has them oldest first and says it is not whole; one
    that begins with an input reads one message more, the end of the turn before it."""
    with running() as (url, session), runtime_at(url) as (runtime, _):
        for n in range(3):
            prompt(url, session.id, f"input {n}", id=f"msg_in{n}")
        wait_idle(url, session)
        assert runtime.transcripts is not None
        view = await runtime.transcripts.read(session.id, 2)
        assert isinstance(view, OpencodeV2Transcript)
        assert [m["id"] for m in view.messages] == [m["id"] for m in session.messages[-3:]]
        assert not view.complete


@pytest_twisted.ensureDeferred
async def test_a_read_that_would_begin_inside_a_turn_reads_back_to_its_input() -> None:
    """A read of the newest messages cut inside a turn reads on back to the turn's input,
    so the turn's answer is found by the input's id."""
    with running() as (url, session), runtime_at(url) as (runtime, _):
        prompt(url, session.id, "the question", id="msg_in0")
        wait_idle(url, session)
        assert runtime.transcripts is not None
        view = await runtime.transcripts.read(session.id, 1)
        assert isinstance(view, OpencodeV2Transcript)
        assert [m["id"] for m in view.messages] == [m["id"] for m in session.messages]
        assert view.answers({"m": "msg_in0"}) == {"m": session.messages[-1]["id"]}


@pytest_twisted.ensureDeferred
async def test_a_hand_off_is_synthetic_input_where_the_server_has_it() -> None:
    """On a server with ``/synthetic`` the batch is synthetic input (no person's turn), and
    its envelopes are found in that entry of the transcript."""
    with running() as (url, session), runtime_at(url) as (runtime, _):
        await hand_off(runtime, session)
        input_id = admission_id(session.id, TEXTS)
        assert (session.admitted[input_id].kind, session.messages[0]["type"]) == (
            "synthetic", "synthetic",
        )  # fmt: skip
        assert runtime.transcripts is not None
        view = await runtime.transcripts.read(session.id, None)
        assert dict(view.homes) == {"msg_1": input_id, "msg_2": input_id}


async def steered_while_running(delivery: Delivery) -> tuple[StandInSession, str, str]:
    """A person's prompt starts a long turn; the batch is handed off with ``delivery``
    while it runs.  The session, the person's input id and the batch's, once idle."""
    with running(step_s=2.0) as (url, session), runtime_at(url) as (runtime, _):
        person = prompt(url, session.id, "the person's own prompt", id="msg_person")["id"]
        wait_until(session.turn_running, PATIENCE_S, "the person's turn")
        prepared = await runtime.prepare(session.id)
        assert prepared is not None
        await runtime.hand_off(session.id, prepared, TEXTS, delivery=delivery)
        await runtime.after_hand_off(session.id, prepared)
        return session, person, admission_id(session.id, TEXTS)


@pytest_twisted.ensureDeferred
async def test_a_steer_merges_into_the_running_turn() -> None:
    """A batch handed off as a steer is read by the turn that runs: one turn, both inputs."""
    session, person, batch = await steered_while_running(Delivery.STEER)
    assert session.admitted[batch].delivery == "steer"
    assert [turn.input_ids for turn in session.turns] == [(person, batch)]


@pytest_twisted.ensureDeferred
async def test_a_queued_batch_is_a_turn_of_its_own_after_the_running_one() -> None:
    """A batch handed off queued waits for the running turn, then runs as its own."""
    session, person, batch = await steered_while_running(Delivery.QUEUE)
    assert session.admitted[batch].delivery == "queue"
    assert [turn.input_ids for turn in session.turns] == [(person,), (batch,)]


@pytest_twisted.ensureDeferred
async def test_a_retried_steer_sends_the_same_body_and_gets_the_same_receipt() -> None:
    """A retry of a steer admission goes as a steer again, whatever its retry is asked
    (the policy may have changed): the same receipt, no 409, one input."""
    with running() as (url, session), runtime_at(url) as (runtime, _):
        seqs = []
        for delivery in (Delivery.STEER, Delivery.QUEUE):
            prepared = await runtime.prepare(session.id)
            assert prepared is not None
            await runtime.hand_off(session.id, prepared, TEXTS, delivery=delivery)
            assert isinstance(prepared.detail, Admission)
            seqs.append(prepared.detail.seq)
        input_id = admission_id(session.id, TEXTS)
        assert (seqs, session.admission_requests[input_id]) == ([1, 1], 2)
        assert session.admitted[input_id].delivery == "steer"


@pytest.mark.parametrize(
    ("first", "retried"), [(ConnectError(), "queue"), ((503, b"{}"), "queue"), (None, "steer")]
)
def test_a_retry_repeats_the_steer_only_where_the_server_may_hold_it(
    first: tuple[int, bytes] | Exception | None, retried: str
) -> None:
    """A steer that never got there (opencode unreachable, or a refusal) is retried as the
    drain asks then (queued: steering turned off meanwhile); one not answered in time may
    be admitted, so its retry repeats its body, steer and all."""
    clock = Clock()
    # the retry's receipt, then the read of the session's agent and model (none yet)
    exchange = ScriptedExchange(first, (200, RECEIPT), (200, b'{"data": []}'))
    runtime = OpencodeV2Runtime(OpencodeV2Client(exchange, clock, 5.0), turn_timeout_s=None)

    def handed(delivery: Delivery) -> Deferred[HandoffMode]:
        prepared = Prepared(False, Admission())
        d = Deferred.fromCoroutine(runtime.hand_off(SESSION, prepared, TEXTS, delivery=delivery))
        clock.advance(5.0)
        return d

    assert isinstance(failure_of(handed(Delivery.STEER)).value, HandOffError)
    result_of(handed(Delivery.QUEUE))
    assert [b["delivery"] for b in exchange.bodies if b is not None] == ["steer", retried]
