"""opencode 2.x on the delivery seam: a batch admitted to the session, once, queued or
steering.

Each hand-off is one input, the batch's envelopes joined by blank lines, sent as
synthetic input (``POST /api/session/{id}/synthetic``, where the server has it: a swarm
message is not a person's turn) or as a prompt (``…/prompt``), with no agent or model
(the session keeps its own); :mod:`pigeond.delivery.opencode_v2_client` tells which.
Its ``delivery`` is the batch's (:class:`~pigeond.delivery.runtime.Delivery`): ``queue``
(a turn of its own after the running one: the person at that session sees it come once
the turn they watch ends) unless the drain found the batch steering (every message
urgent and asked to steer, the target's policy allowing it: :mod:`pigeond.delivery.steering`);
then ``steer``, read at the running turn's next step, so the turn the person watches
takes it in before it goes on.  Its admission
``id`` is derived from pigeond's own ids (the target and the batch's msg_ids,
:func:`admission_id`): admission is durable and idempotent on the server, so a retry
after a timeout or a crash re-admits the same input and gets the same receipt, never a
second turn.  A 409 (opencode holds another input under that id: its record and
pigeond's disagree) is logged and the target held; the same body is all that ever goes
under that id.

A retry of an admission sends the very body that may have been admitted before, its
delivery too: the delivery an admission id went with is remembered once the server may
have taken it (a receipt, or no answer in time), so a policy changed meanwhile cannot
turn a retry into a 409.  One that surely never got there (opencode unreachable, or a
refusal) is not: its retry goes with the delivery in force then (steering turned off
meanwhile: queued).

pigeond still sends one batch at a time: after a hand-off it waits until the session is
idle (``POST …/wait``) before the next; its own queue stays the truth.  This runtime
``steers``: that wait may be cancelled by the drain for a steering batch, which goes
without waiting for idle (nor does :meth:`OpencodeV2Runtime.prepare` ever wait): a steer
is meant for the turn that runs.  Whether a
hand-off was seen and answered is read from the transcript
(:mod:`pigeond.delivery.opencode_v2_transcript`), never taken from the event stream,
which is volatile by contract.

What a hand-off records as its agent and model (the hand-off's mode, as a 1.x's records
what its prompt named) is what the session runs with: the newest ``assistant`` message's
``agent`` and ``model`` in the transcript last read (the verifier's reads, or the newest
:data:`MODE_READ` messages read after the admission while none showed them).  pigeond
never sets them (no ``…/agent`` or ``…/model`` call).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger

from pigeond.delivery.failures import FailureKind, HandOffError
from pigeond.delivery.opencode_transcript import envelope_ids
from pigeond.delivery.opencode_v2_client import AdmissionConflict, OpencodeV2Client
from pigeond.delivery.opencode_v2_transcript import (
    INPUT_TYPES,
    OpencodeV2Transcript,
    begins_a_turn,
)
from pigeond.delivery.runtime import Delivery, Prepared, TranscriptSource
from pigeond.model import NO_MODE, HandoffMode, Runtime

log = Logger(namespace="pigeond.delivery.arbiter")  # one story in the logs with the arbiter's

ADMISSION_ID_CHARS = 26  # as long as opencode's own ids after ``msg_``
REMEMBERED_DELIVERIES = 4096  # admission ids whose delivery a retry repeats (and targets
# whose agent and model are remembered)
MODE_READ = 8  # the newest messages read for a session's agent and model, if none was read
SESSION_OWN_NOTE = "the session's own, as its newest turn ran (a 2.x input names neither)"


def admission_id(target: str, texts: Sequence[str]) -> str:
    """The admission id of a batch for ``target``: the same batch always gives the same
    id, another batch (or target) another one.  From the envelopes' msg_ids (pigeond's
    own, unique), in a fixed order; the texts themselves if they carry none."""
    ids = sorted(envelope_ids(texts)) or list(texts)
    digest = hashlib.sha256("\0".join(["pigeond", target, *ids]).encode()).hexdigest()
    return "msg_" + digest[:ADMISSION_ID_CHARS]


def joined(texts: Sequence[str]) -> str:
    """The batch as one input: its envelopes, each beginning a line."""
    return "\n\n".join(texts)


@dataclass(slots=True)
class Admission:
    """One hand-off: the input's id, and its receipt once admitted."""

    id: str = ""
    seq: object = None


def session_mode(messages: Sequence[Mapping[str, Any]]) -> HandoffMode | None:
    """The agent and model the session runs with, as the newest assistant message of
    ``messages`` (oldest first) shows them (``agent``, ``model``: ``{"id", "providerID",
    "variant"?}``); None when no assistant message is there, or it names neither."""
    for message in reversed(messages):
        if message.get("type") != "assistant":
            continue
        agent, model = message.get("agent"), message.get("model")
        model = model if isinstance(model, dict) else {}
        provider, model_id, variant = model.get("providerID"), model.get("id"), model.get("variant")
        if not isinstance(agent, str) or not (
            isinstance(provider, str) and isinstance(model_id, str)
        ):
            return None
        variant = variant if isinstance(variant, str) else None
        return HandoffMode(agent, provider, model_id, variant, SESSION_OWN_NOTE)
    return None


def may_have_admitted(error: HandOffError) -> bool:
    """Whether an admission that failed with ``error`` may be on the server all the same:
    no answer in time, or one cut or unreadable; not when opencode could not be reached,
    nor when it answered a refusal (a status other than 2xx)."""
    if error.kind is FailureKind.OUTAGE:
        return False
    return error.status is None or 200 <= error.status < 300


class OpencodeV2Transcripts:
    """A 2.x session's transcript (:class:`~pigeond.delivery.runtime.TranscriptSource`);
    each read is shown to ``on_read`` (the agent and model its newest turn ran with)."""

    def __init__(
        self,
        client: OpencodeV2Client,
        on_read: Callable[[str, list[dict[str, Any]]], None] = lambda target, messages: None,
    ) -> None:
        self._client = client
        self._on_read = on_read

    async def read(self, target: str, limit: int | None) -> OpencodeV2Transcript:
        """The newest ``limit`` messages, or more: a read that may begin inside a turn
        reads back to where the turn before it ended: one message more when it begins
        with an input (what came before it tells whether it began its turn, or was a
        steer read in the middle of one), twice as many when it begins with a step.  A
        2.x step names no input, so only the inputs before it tell whose turn it is;
        without that, a turn longer than ``limit`` (many tool steps) would never show
        its answer and its usage, as the verifier reads."""
        messages = await self._client.messages(target, limit)
        while limit is not None and len(messages) >= limit > 0 and not begins_a_turn(messages):
            limit = limit + 1 if messages[0].get("type") in INPUT_TYPES else limit * 2
            messages = await self._client.messages(target, limit)
        self._on_read(target, messages)
        return OpencodeV2Transcript(messages, limit is None or len(messages) < limit)


class OpencodeV2Runtime:
    """opencode 2.x sessions (:mod:`pigeond.delivery.runtime`'s ``AgentRuntime``)."""

    name: Runtime = Runtime.OPENCODE
    steers: bool = True

    def __init__(
        self, client: OpencodeV2Client, *, turn_timeout_s: Callable[[], float] | None
    ) -> None:
        """``turn_timeout_s`` gives the longest wait for a session to go idle after a
        hand-off; None: ``call`` delivery (no wait)."""
        self._client = client
        self._turn_timeout_s = turn_timeout_s
        self.transcripts: TranscriptSource | None = OpencodeV2Transcripts(client, self._observe)
        self._waits: set[Deferred[bool]] = set()
        self._deliveries: dict[str, Delivery] = {}  # admission id → its delivery, oldest first
        self._modes: dict[str, HandoffMode] = {}  # target → its agent and model, newest first

    def may_take_now(self, target: str) -> bool:
        return True  # pushed: the server queues the input behind a running turn

    async def prepare(self, target: str) -> Prepared | None:
        """Never waits: the server queues behind a running turn, and a steer goes into it."""
        return Prepared(False, Admission())

    async def hand_off(
        self,
        target: str,
        prepared: Prepared,
        texts: Sequence[str],
        *,
        delivery: Delivery = Delivery.QUEUE,
    ) -> HandoffMode:
        admission = prepared.detail
        assert isinstance(admission, Admission)
        admission.id = admission_id(target, texts)
        delivery = self._deliveries.get(admission.id, delivery)
        try:
            receipt = await self._client.admit(target, admission.id, joined(texts), delivery)
        except AdmissionConflict as e:
            log.error("{target}: {error}", target=target, error=str(e))
            raise
        except HandOffError as e:
            if may_have_admitted(e):
                self._remember(admission.id, delivery)
            raise
        self._remember(admission.id, delivery)
        admission.seq = receipt.get("admittedSeq")
        log.debug("{target}: admitted as {id} ({delivery}, seq {seq})", target=target,
                  id=admission.id, delivery=delivery.value, seq=admission.seq)  # fmt: skip
        return await self._mode_of(target)

    async def _mode_of(self, target: str) -> HandoffMode:
        """The agent and model ``target`` runs with, as the transcript last read showed them
        (its newest messages read now if none showed them yet); NO_MODE when none does.
        Only a record: the input named neither, and a failed read fails no hand-off."""
        if target not in self._modes:
            try:
                self._observe(target, await self._client.messages(target, MODE_READ))
            except HandOffError as e:
                log.debug("{target}: its agent and model not read: {error}", target=target,
                          error=str(e))  # fmt: skip
        return self._modes.get(target, NO_MODE)

    def _observe(self, target: str, messages: list[dict[str, Any]]) -> None:
        """A read of ``target``'s transcript: the agent and model its newest turn ran with."""
        mode = session_mode(messages)
        if mode is None:
            return
        self._modes.pop(target, None)
        self._modes[target] = mode
        while len(self._modes) > REMEMBERED_DELIVERIES:
            del self._modes[next(iter(self._modes))]

    def _remember(self, admission: str, delivery: Delivery) -> None:
        """``admission`` may be on the server with ``delivery``: its retries repeat it."""
        self._deliveries.setdefault(admission, delivery)
        while len(self._deliveries) > REMEMBERED_DELIVERIES:
            del self._deliveries[next(iter(self._deliveries))]

    async def after_hand_off(self, target: str, prepared: Prepared) -> None:
        if self._turn_timeout_s is None:
            return
        timeout_s = self._turn_timeout_s()
        wait = Deferred.fromCoroutine(self._client.wait_idle(target, timeout_s))
        self._waits.add(wait)
        try:
            idle = await wait
        except CancelledError:
            return
        except HandOffError as e:
            log.info("{target}: not known idle after its hand-off: {error}", target=target,
                     error=str(e))  # fmt: skip
            return
        finally:
            self._waits.discard(wait)
        if not idle:
            log.info("{target}: still running {s} s after its hand-off", target=target,
                     s=timeout_s)  # fmt: skip

    def drain_ended(self, target: str) -> None:
        return None  # nobody waits for a push's drain

    def stop(self) -> None:
        for wait in list(self._waits):
            wait.cancel()
