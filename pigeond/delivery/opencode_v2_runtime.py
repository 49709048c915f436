"""opencode 2.x on the delivery seam: a batch admitted to the session's queue, once.

Each hand-off is one input, the batch's envelopes joined by blank lines, sent as
``POST /api/session/{id}/prompt`` with ``delivery: "queue"`` (one turn per input, after
the running one) and no agent or model (the session keeps its own).  Its admission
``id`` is derived from pigeond's own ids (the target and the batch's msg_ids,
:func:`admission_id`): admission is durable and idempotent on the server, so a retry
after a timeout or a crash re-admits the same input and gets the same receipt, never a
second turn.  A 409 (opencode holds another input under that id: its record and
pigeond's disagree) is logged and the target held; the same body is all that ever goes
under that id.

pigeond still sends one batch at a time: after a hand-off it waits until the session is
idle (``POST …/wait``) before the next; its own queue stays the truth.  Whether a
hand-off was seen and answered is read from the transcript
(:mod:`pigeond.delivery.opencode_v2_transcript`), never taken from the event stream,
which is volatile by contract.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger

from pigeond.delivery.failures import HandOffError
from pigeond.delivery.opencode_transcript import envelope_ids
from pigeond.delivery.opencode_v2_client import AdmissionConflict, OpencodeV2Client
from pigeond.delivery.opencode_v2_transcript import OpencodeV2Transcript, begins_a_turn
from pigeond.delivery.runtime import Prepared, TranscriptSource
from pigeond.model import NO_MODE, HandoffMode, Runtime

log = Logger(namespace="pigeond.delivery.arbiter")  # one story in the logs with the arbiter's

ADMISSION_ID_CHARS = 26  # as long as opencode's own ids after ``msg_``


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


class OpencodeV2Transcripts:
    """A 2.x session's transcript (:class:`~pigeond.delivery.runtime.TranscriptSource`)."""

    def __init__(self, client: OpencodeV2Client) -> None:
        self._client = client

    async def read(self, target: str, limit: int | None) -> OpencodeV2Transcript:
        """The newest ``limit`` messages, or more: a read that would begin inside a turn
        reads back (twice as many each time) to where that turn began.  A 2.x step names
        no input, so only the input before it tells whose turn it is; without it, a turn
        longer than ``limit`` (many tool steps) would never show its answer and its
        usage, as the verifier reads."""
        messages = await self._client.messages(target, limit)
        while limit is not None and len(messages) >= limit > 0 and not begins_a_turn(messages):
            limit *= 2
            messages = await self._client.messages(target, limit)
        return OpencodeV2Transcript(messages, limit is None or len(messages) < limit)


class OpencodeV2Runtime:
    """opencode 2.x sessions (:mod:`pigeond.delivery.runtime`'s ``AgentRuntime``)."""

    name: Runtime = Runtime.OPENCODE

    def __init__(
        self, client: OpencodeV2Client, *, turn_timeout_s: Callable[[], float] | None
    ) -> None:
        """``turn_timeout_s`` gives the longest wait for a session to go idle after a
        hand-off; None: ``call`` delivery (no wait)."""
        self._client = client
        self._turn_timeout_s = turn_timeout_s
        self.transcripts: TranscriptSource | None = OpencodeV2Transcripts(client)
        self._waits: set[Deferred[bool]] = set()

    def may_take_now(self, target: str) -> bool:
        return True  # pushed: the server queues the input behind a running turn

    async def prepare(self, target: str) -> Prepared | None:
        return Prepared(False, Admission())

    async def hand_off(self, target: str, prepared: Prepared, texts: Sequence[str]) -> HandoffMode:
        admission = prepared.detail
        assert isinstance(admission, Admission)
        admission.id = admission_id(target, texts)
        try:
            receipt = await self._client.admit(target, admission.id, joined(texts))
        except AdmissionConflict as e:
            log.error("{target}: {error}", target=target, error=str(e))
            raise
        admission.seq = receipt.get("admittedSeq")
        log.debug("{target}: admitted as {id} (seq {seq})", target=target, id=admission.id,
                  seq=admission.seq)  # fmt: skip
        return NO_MODE

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
