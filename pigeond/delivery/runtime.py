"""The seam between delivery and the agent runtimes: how a runtime takes a batch, says
whether its session can take one now, and shows what reached its transcript.

Everything that makes delivery trustworthy lives above this seam and holds for every
runtime alike (:mod:`pigeond.delivery.drain`, :mod:`pigeond.delivery.arbiter`,
:mod:`pigeond.delivery.verifier`, :mod:`pigeond.delivery.recovery`): one batch in
flight per target, priority then FIFO, the batch bounds, retries by failure class, the
intent committed before a hand-off, verification and answers from the transcript.  A
runtime says only what differs:

* opencode 1.x (:mod:`pigeond.delivery.opencode_runtime`) is *pushed*: a prompt is
  sent when the session is idle, and the drain waits until the turn it started ends;
* Claude Code (:mod:`pigeond.delivery.claude_runtime`) is *asked*: its Stop hook asks
  at each turn end, its channel while it is idle, and a batch goes only to a session
  that is asking (:mod:`pigeond.delivery.pull_slots`);
* a member with no session of its own (:mod:`pigeond.delivery.claude_runtime`'s
  ``McpRuntime``) takes its messages when its own ``swarm_read`` asks;
* opencode 2.x (:mod:`pigeond.delivery.opencode_v2_runtime`) is pushed too, and alone
  ``steers``: a batch may go into the session's running turn (:class:`Delivery`).

Every runtime's ``hand_off`` is told the batch's :class:`Delivery`; only one that
``steers`` acts on it (the others hand every batch off as they always do, after the
running turn), and only then does the drain form steering batches at all
(:mod:`pigeond.delivery.steering`).

A runtime raises :class:`~pigeond.delivery.failures.HandOffError` (with its kind) and
nothing else for a failed hand-off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from pigeond.costs import EndedTurn
from pigeond.model import HandoffMode, Runtime, runtime_of


class Delivery(StrEnum):
    """How a batch goes to a session that ``steers`` (opencode 2.x's ``delivery``)."""

    QUEUE = "queue"  # a turn of its own, after the running one
    STEER = "steer"  # into the running turn, read at its next step


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a runtime learnt before a hand-off (an opencode session's directory and mode,
    the asking session of a pull runtime), passed back to it for the hand-off itself.
    ``waited``: the runtime waited (a turn ran), so the queue is read again before the
    batch goes: messages, more urgent ones too, may have come meanwhile."""

    waited: bool
    detail: object


class TranscriptView(Protocol):
    """What one read of a target's transcript shows."""

    @property
    def homes(self) -> Mapping[str, str | None]:
        """msg_id → the transcript entry its envelope came in (None if it has no id), for
        every envelope the target was given (as a user message, never in a tool's output)."""
        ...

    @property
    def complete(self) -> bool:
        """Whether the whole transcript was read (not only its newest messages)."""
        ...

    def answers(self, where: Mapping[str, str]) -> dict[str, str]:
        """For the msg_ids whose entries ``where`` names: those answered since (the turn
        that read them ended with the target's reply), and by what."""
        ...

    def turns(self, where: Mapping[str, str]) -> list[EndedTurn]:
        """The turns that consumed the msg_ids ``where`` names and have ended, with what
        they used (:mod:`pigeond.costs`); a turn still running is left for a later read."""
        ...


class TranscriptSource(Protocol):
    async def read(self, target: str, limit: int | None) -> TranscriptView:
        """The target's transcript (its newest ``limit`` messages; all when None).  A target
        the runtime does not have shows an empty view; a transcript that cannot be read now
        raises :class:`~pigeond.delivery.failures.HandOffError` with kind OUTAGE."""
        ...


class AgentRuntime(Protocol):
    """One agent runtime on the delivery seam."""

    name: Runtime

    @property
    def steers(self) -> bool:
        """Whether a batch can go into the session's running turn (Delivery.STEER): the
        drain forms steering batches, and cuts its wait after a hand-off short for one,
        only then."""
        ...

    # where hand-offs are verified and answers found; None: a hand-off is seen when made
    # (a pull-only member reads its messages through pigeond itself)
    transcripts: TranscriptSource | None

    def may_take_now(self, target: str) -> bool:
        """Whether a drain of ``target`` could hand off now, known without waiting (a pull
        runtime: is its session asking?); False leaves its messages queued, untouched."""
        ...

    async def prepare(self, target: str) -> Prepared | None:
        """Everything before the hand-off that may wait (an opencode session's running
        turn); None when the target cannot take a batch now after all (nothing is spent)."""
        ...

    async def hand_off(
        self,
        target: str,
        prepared: Prepared,
        texts: Sequence[str],
        *,
        delivery: Delivery = Delivery.QUEUE,
    ) -> HandoffMode:
        """Give ``texts`` (the batch's envelopes) to the target; what it was handed to.
        ``delivery`` is STEER only for a runtime that ``steers``; others ignore it."""
        ...

    async def after_hand_off(self, target: str, prepared: Prepared) -> None:
        """Wait until the target may take the next batch (the turn it started ended).  For
        a runtime that ``steers`` the wait may be cancelled: a steering batch goes without
        waiting for the running turn to end (that is its point)."""
        ...

    def drain_ended(self, target: str) -> None:
        """The drain of ``target`` ended: a session asking still gets its answer now."""
        ...

    def stop(self) -> None:
        """pigeond stops: waits under way are cut short (what was handed off is handed off)."""
        ...


class Runtimes:
    """Each target's runtime, told by its id (:func:`pigeond.model.runtime_of`)."""

    def __init__(self, runtimes: Sequence[AgentRuntime]) -> None:
        self._by_name = {runtime.name: runtime for runtime in runtimes}

    def of(self, target: str) -> AgentRuntime:
        """``target``'s runtime; a target of a runtime this daemon has none for (an id no
        send could give) is taken as opencode's."""
        try:
            name = runtime_of(target)
        except ValueError:
            name = Runtime.OPENCODE
        return self._by_name.get(name) or self._by_name[Runtime.OPENCODE]

    def all(self) -> list[AgentRuntime]:
        return list(self._by_name.values())

    def transcripts_of(self, target: str) -> TranscriptSource | None:
        return self.of(target).transcripts
