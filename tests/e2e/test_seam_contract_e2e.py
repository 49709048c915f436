"""The delivery seam's contract (:mod:`pigeond.delivery.runtime`), one clause a test, each run
against every opencode runtime: 1.x against the real opencode 1.18.33 and 1.15.4 (offline,
the fake model answering), 2.x against the stand-in 2.x server (its echo model answering).

Each runtime is built as the daemon builds it (:mod:`tests.e2e.seam_runtimes`), and driven
as a drain drives it: ``may_take_now``, ``prepare``, ``hand_off`` with envelopes pigeond
rendered itself, ``after_hand_off``, ``drain_ended``; what reached the session is read
through the runtime's own ``TranscriptSource`` and, raw, from the server.  A clause only
one runtime honours is a test of its own at the end, named for that runtime.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from pigeond.delivery.failures import FailureKind, HandOffError
from pigeond.delivery.opencode_v2_runtime import Admission
from pigeond.delivery.runtime import Prepared, TranscriptView
from pigeond.envelope import render_envelope
from pigeond.ids import make_msg_id
from pigeond.model import StoredMessage
from testkit.fake_llm import FakeLLM
from testkit.messages import new_message, queued
from testkit.polling import PATIENCE_S
from tests.e2e.seam_runtimes import (
    OpencodeV1UnderTest,
    OpencodeV2UnderTest,
    RuntimeUnderTest,
    standin_served,
    stopped_after,
    until,
)

V1_SERVERS = {"opencode-1.18.33": "opencode_1_18", "opencode-1.15.4": "opencode_1_15"}
V2_STANDIN = "opencode-2.x-stand-in"
UNKNOWN_SESSION = "ses_0123456789abUnknownSessi01"
_payloads = itertools.count(1)


@pytest_twisted.async_yield_fixture(params=[*V1_SERVERS, V2_STANDIN])
async def under_test(
    request: pytest.FixtureRequest, tmp_path: Path, fake_llm: FakeLLM
) -> AsyncIterator[RuntimeUnderTest]:
    """The runtime under test, built as the daemon builds it, and the server behind it."""
    if request.param == V2_STANDIN:
        with standin_served() as (standin, url):
            async with stopped_after(OpencodeV2UnderTest(standin, url, tmp_path)) as runtime:
                yield runtime
        return
    server = request.getfixturevalue(V1_SERVERS[request.param])
    async with stopped_after(OpencodeV1UnderTest(server, fake_llm, tmp_path)) as runtime:
        yield runtime


def batch_for(session: str, size: int = 2) -> list[StoredMessage]:
    """``size`` queued messages for ``session``, with pigeond's own ids, each with a payload
    that needs escaping."""
    batch = []
    for n in range(size):
        msg_id = make_msg_id(int(reactor.seconds() * 1000))
        payload = f'task {next(_payloads)}: a <b> & "c"'
        message = new_message(session, msg_id=msg_id, sender=f"ses_sender{n}", payload=payload)
        batch.append(queued(message, accept_seq=n + 1))
    return batch


def ids_of(batch: Sequence[StoredMessage]) -> set[str]:
    return {message.msg_id for message in batch}


async def hand_off(
    under_test: RuntimeUnderTest, session: str, batch: Sequence[StoredMessage]
) -> Prepared:
    """As a drain hands off: the target may take it, prepared, the envelopes given."""
    runtime = under_test.runtime
    assert runtime.may_take_now(session)
    prepared = await runtime.prepare(session)
    assert prepared is not None
    await runtime.hand_off(session, prepared, [render_envelope(m) for m in batch])
    return prepared


async def deliver(
    under_test: RuntimeUnderTest, session: str, batch: Sequence[StoredMessage]
) -> None:
    """A whole hand-off, as a drain makes it in turn delivery: given, its turn waited out."""
    prepared = await hand_off(under_test, session, batch)
    await under_test.runtime.after_hand_off(session, prepared)
    under_test.runtime.drain_ended(session)


async def answered_view(
    under_test: RuntimeUnderTest, session: str, batch: Sequence[StoredMessage]
) -> TranscriptView:
    """The session's transcript, once it shows the batch answered (read until it does)."""

    async def answered() -> TranscriptView | None:
        view = await under_test.transcripts.read(session, None)
        where = {m: h for m, h in view.homes.items() if m in ids_of(batch) and h is not None}
        return view if set(view.answers(where)) == ids_of(batch) else None

    return await until(answered, f"the batch answered in {session}'s transcript")


async def one_batch_answered(
    under_test: RuntimeUnderTest,
) -> tuple[list[StoredMessage], TranscriptView]:
    """A batch delivered to a new session, and its transcript once the batch is answered."""
    session = await under_test.create_session()
    batch = batch_for(session)
    await deliver(under_test, session, batch)
    return batch, await answered_view(under_test, session, batch)


def where_of(view: TranscriptView, batch: Sequence[StoredMessage]) -> dict[str, str]:
    """The batch's msg_ids and their homes in ``view``; every one must have a home."""
    homes = {m: view.homes.get(m) for m in ids_of(batch)}
    assert all(homes.values()), homes
    return {m: h for m, h in homes.items() if h is not None}


@pytest_twisted.ensureDeferred
async def test_a_batch_handed_off_has_one_home_per_message(under_test: RuntimeUnderTest) -> None:
    """Every msg_id of a batch handed off maps to the one entry that carries its envelope."""
    session = await under_test.create_session()
    batch = batch_for(session)
    await deliver(under_test, session, batch)
    view = await under_test.transcripts.read(session, None)
    where = where_of(view, batch)
    given = await under_test.given(session)
    for message in batch:
        carrying = [g.entry for g in given if render_envelope(message) in g.text]
        assert carrying == [where[message.msg_id]], (message.msg_id, carrying)


@pytest_twisted.ensureDeferred
async def test_envelopes_are_given_as_one_input_each(under_test: RuntimeUnderTest) -> None:
    """Each envelope reaches the session verbatim, beginning a line of one input of the
    runtime's kind for swarm messages (1.x: user text; 2.x: synthetic input, not a
    person's turn), and in no other input (never twice)."""
    session = await under_test.create_session()
    batch = batch_for(session, size=3)
    await deliver(under_test, session, batch)
    given = await under_test.given(session)
    for message in batch:
        envelope = render_envelope(message)
        holding = [g for g in given if f'msg_id="{message.msg_id}"' in g.text]
        assert [g.kind for g in holding] == [under_test.input_kind], holding
        assert re.search(f"(^|\n){re.escape(envelope)}", holding[0].text), holding[0].text


@pytest_twisted.ensureDeferred
async def test_the_targets_reply_answers_every_message_of_the_batch(
    under_test: RuntimeUnderTest,
) -> None:
    """Once the model replied, ``answers`` names every msg_id of the batch, by one reply."""
    batch, view = await one_batch_answered(under_test)
    answers = view.answers(where_of(view, batch))
    assert set(answers) == ids_of(batch)
    assert len(set(answers.values())) == 1, "one turn, one reply for the whole batch"


@pytest_twisted.ensureDeferred
async def test_the_ended_turn_that_consumed_the_batch_is_reported(
    under_test: RuntimeUnderTest,
) -> None:
    """``turns`` reports one ended turn, from the batch's entry, naming all its msg_ids."""
    batch, view = await one_batch_answered(under_test)
    where = where_of(view, batch)
    [turn] = view.turns(where)
    assert turn.key == where[batch[0].msg_id]
    assert set(turn.msg_ids) == ids_of(batch)
    assert not turn.partial


@pytest_twisted.ensureDeferred
async def test_after_the_hand_off_the_session_is_idle_and_the_next_batch_is_its_own_turn(
    under_test: RuntimeUnderTest,
) -> None:
    """When ``after_hand_off`` returns no turn runs, and the next batch, handed off at once,
    is a turn of its own: one turn per batch."""
    session = await under_test.create_session()
    first, second = batch_for(session), batch_for(session)
    await deliver(under_test, session, first)
    assert not await under_test.running(session)
    await deliver(under_test, session, second)
    view = await answered_view(under_test, session, [*first, *second])
    turns = view.turns(where_of(view, [*first, *second]))
    assert sorted(sorted(turn.msg_ids) for turn in turns) == sorted(
        [sorted(ids_of(first)), sorted(ids_of(second))]
    )
    assert len({turn.key for turn in turns}) == 2


@pytest_twisted.ensureDeferred
async def test_a_batch_for_a_session_in_its_own_turn_is_a_turn_of_its_own_after_it(
    under_test: RuntimeUnderTest,
) -> None:
    """A batch handed off while a person's turn runs never lands inside it: the person's
    prompt and the batch are each answered, by turns of their own."""
    session = await under_test.create_session()
    batch = batch_for(session)
    with under_test.turns_held(session):
        await under_test.prompt(session, "a person's own question")
        await until(lambda: under_test.running(session), f"{session}'s own turn running")
        delivered = Deferred.fromCoroutine(deliver(under_test, session, batch))
    await delivered.addTimeout(PATIENCE_S, reactor)
    view = await answered_view(under_test, session, batch)
    [person] = [g.entry for g in await under_test.given(session) if "own question" in g.text]
    where = where_of(view, batch)
    assert person not in where.values()
    [turn] = view.turns(where)
    assert turn.key != person and set(turn.msg_ids) == ids_of(batch)
    answers = view.answers({"person": person, **where})
    assert answers.keys() == {"person", *where} and answers["person"] != answers[turn.msg_ids[0]]


@pytest_twisted.ensureDeferred
async def test_an_unknown_sessions_transcript_reads_as_empty(
    under_test: RuntimeUnderTest,
) -> None:
    """A session the server does not have shows an empty, whole transcript, no error."""
    view = await under_test.transcripts.read(UNKNOWN_SESSION, None)
    assert (dict(view.homes), view.complete) == ({}, True)
    assert (view.answers({}), view.turns({})) == ({}, [])


@pytest_twisted.ensureDeferred
async def test_a_hand_off_to_an_unknown_session_fails_permanently(
    under_test: RuntimeUnderTest,
) -> None:
    """Handing off to a session the server does not have raises HandOffError, PERMANENT."""
    with pytest.raises(HandOffError) as raised:
        await hand_off(under_test, UNKNOWN_SESSION, batch_for(UNKNOWN_SESSION))
    assert raised.value.kind is FailureKind.PERMANENT


@pytest_twisted.ensureDeferred
async def test_a_whole_read_is_complete_and_a_cut_one_is_not(
    under_test: RuntimeUnderTest,
) -> None:
    """``complete`` is true for a read of everything (or of more than there is), false
    when ``limit`` cut it (a read of the last turn after an earlier one)."""
    batch, whole = await one_batch_answered(under_test)
    session = batch[0].to_session
    assert session is not None and whole.complete
    later = batch_for(session)
    await deliver(under_test, session, later)
    await answered_view(under_test, session, later)
    assert (await under_test.transcripts.read(session, 1000)).complete
    assert not (await under_test.transcripts.read(session, 1)).complete


@pytest_twisted.ensureDeferred
async def test_a_read_cut_inside_the_batchs_turn_still_finds_its_turn_and_answer(
    under_test: RuntimeUnderTest,
) -> None:
    """A read of the newest messages that begins after the batch's entry (a long turn, as
    the verifier reads it) still finds the turn and the answer, for entries known from an
    earlier read."""
    batch, whole = await one_batch_answered(under_test)
    session = batch[0].to_session
    assert session is not None
    where = where_of(whole, batch)
    cut = await under_test.transcripts.read(session, 1)
    assert cut.answers(where) == whole.answers(where)
    assert [set(turn.msg_ids) for turn in cut.turns(where)] == [ids_of(batch)]


@pytest_twisted.ensureDeferred
async def test_stop_cuts_the_wait_for_a_turn_short(under_test: RuntimeUnderTest) -> None:
    """``stop`` ends a wait for a turn under way at once: it returns while the turn runs
    (held), and what was handed off stays handed off."""
    session = await under_test.create_session()
    batch = batch_for(session)
    with under_test.turns_held(session):
        prepared = await hand_off(under_test, session, batch)
        waiting = Deferred.fromCoroutine(under_test.runtime.after_hand_off(session, prepared))
        await until(lambda: under_test.running(session), f"{session}'s turn running")
        assert not waiting.called
        under_test.runtime.stop()
        await waiting.addTimeout(PATIENCE_S, reactor)
        assert await under_test.running(session), "the wait ended before the turn did"
        view = await under_test.transcripts.read(session, None)
        assert view.turns(where_of(view, batch)) == []


@pytest.mark.parametrize("under_test", [V2_STANDIN], indirect=True)
@pytest_twisted.ensureDeferred
async def test_2x_only_a_batch_admitted_again_gets_the_same_receipt_and_no_second_turn(
    under_test: RuntimeUnderTest,
) -> None:
    """2.x admits an input once per id, and the id is the batch's: the same batch handed off
    again (a retry after a timeout or a crash) gets the same receipt and runs no second
    turn.  opencode 1.x has no such id: a second ``prompt_async`` is a second prompt, so
    there a retry is guarded above the seam (the intent committed before the hand-off, the
    transcript searched before a retry: :mod:`pigeond.delivery.recovery`)."""
    session = await under_test.create_session()
    batch = batch_for(session)
    receipts = []
    for _ in range(2):
        prepared = await hand_off(under_test, session, batch)
        await under_test.runtime.after_hand_off(session, prepared)
        admission = admission_of(prepared)
        receipts.append((admission.id, admission.seq))
    assert receipts[0] == receipts[1]
    view = await answered_view(under_test, session, batch)
    assert len(view.turns(where_of(view, batch))) == 1
    assert [g.entry for g in await under_test.given(session)] == [receipts[0][0]]


def admission_of(prepared: Prepared) -> Admission:
    """The 2.x admission a hand-off made, under the daemon's switching runtime's wrapper."""
    detail = prepared.detail
    inner = getattr(detail, "prepared", None)  # the switching runtime's _Via
    admission = inner.detail if isinstance(inner, Prepared) else detail
    assert isinstance(admission, Admission)
    return admission


@pytest.mark.parametrize("under_test", list(V1_SERVERS), indirect=True)
@pytest_twisted.ensureDeferred
async def test_1x_only_the_ended_turn_carries_the_tokens_opencode_wrote(
    under_test: RuntimeUnderTest,
) -> None:
    """A 1.x turn's usage is the tokens opencode wrote for it (the fake model's counts).
    The 2.x stand-in writes no tokens on its assistant messages (how a real 2.x counts
    them has not been read), so there the usage is only ever zero."""
    batch, view = await one_batch_answered(under_test)
    [turn] = view.turns(where_of(view, batch))
    assert turn.usage.input > 0 and turn.usage.output > 0, turn.usage
