"""The arbiter's database calls for many targets at once, made as one call.

Under load every target's drain asks for its next batch and records its hand-off, and
each call made alone is a trip to a database thread and back: a queue, a wake-up, a
result sent back through the reactor's waker.  At 1,000 hand-offs a second those trips
cost more than the queries.  So calls of one kind that come while one is under way wait
for it and then go together, in one trip; a call that comes when none is under way goes
at once, so an idle target waits for nothing.  Each caller still gets its own answer,
and a trip that fails fails every call in it, as each would have failed alone (a
locked or full database fails them all the same).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from pigeond.model import HandoffMode, StoredMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.drain_steps import DrainStep

T = TypeVar("T")
R = TypeVar("R")


class Grouped(Generic[T, R]):
    """``group(item)`` answers ``run([...])[i]`` for its item, many items to one ``run``."""

    def __init__(self, run: Callable[[list[T]], Deferred[list[R]]]) -> None:
        self._run = run
        self._queued: list[tuple[T, Deferred[R]]] = []
        self._busy = False  # a run is under way, or its answers are being handed out
        self._starting = False  # inside _start's loop (a run that answers at once)

    def __call__(self, item: T) -> Deferred[R]:
        answer: Deferred[R] = Deferred()
        self._queued.append((item, answer))
        if not self._busy:
            self._start()
        return answer

    def _start(self) -> None:
        """Run what is queued; a loop, not recursion, when the runs answer at once."""
        if self._starting:
            return
        self._starting = True
        try:
            while self._queued and not self._busy:
                group, self._queued = self._queued, []
                self._busy = True
                self._run([item for item, _ in group]).addBoth(self._answer, group)
        finally:
            self._starting = False

    def _answer(self, results: list[R] | Failure, group: list[tuple[T, Deferred[R]]]) -> None:
        try:
            if isinstance(results, Failure):
                for _, answer in group:
                    answer.errback(results.value)
            else:
                for (_, answer), result in zip(group, results, strict=True):
                    answer.callback(result)
        finally:
            self._busy = False
        self._start()


@dataclass(frozen=True, slots=True)
class ReadyAsk:
    """One target's question: its next batch, due at ``now_ms``, at most ``limit``."""

    target: str
    now_ms: int
    limit: int


def ready_batches(repo: SwarmRepository, asks: Sequence[ReadyAsk]) -> list[list[StoredMessage]]:
    """Each ask's :meth:`~SwarmRepository.ready_batch`, on one database thread's trip."""
    return [repo.ready_batch(a.target, a.now_ms, a.limit) for a in asks]


@dataclass(frozen=True, slots=True)
class HandOffRecord:
    """A prompt opencode took: its messages, when, until when to verify, which mode."""

    msg_ids: tuple[str, ...]
    now_ms: int
    verify_by: int
    mode: HandoffMode


# The part of a due head that goes as one batch, with its envelopes (pigeond/delivery/drain.py)
Cut = Callable[[list[StoredMessage]], tuple[list[StoredMessage], list[str]]]


@dataclass(frozen=True, slots=True)
class NextRead:
    """Read the target's due head (at most ``limit``) and claim ``cut`` of it."""

    limit: int
    cut: Cut


@dataclass(frozen=True, slots=True)
class StepAsk:
    """One drain step's trip (:class:`~pigeond.storage.drain_steps.DrainStep`): the prompt
    just taken, intents marked ahead to clear, the next head to read and claim."""

    target: str
    now_ms: int
    handed_off: HandOffRecord | None = None
    released: tuple[str, ...] = ()
    next: NextRead | None = None


@dataclass(frozen=True, slots=True)
class StepAnswer:
    """The hand-off's ids recorded; the head read; the messages claimed (their intent
    committed: the only ones to send) and their envelopes, in order."""

    handed_off: list[str]
    due: list[StoredMessage]
    messages: list[StoredMessage]
    texts: list[str]


def drain_steps(repo: SwarmRepository, asks: Sequence[StepAsk]) -> list[StepAnswer]:
    """Every ask's step in one transaction and one commit
    (:meth:`~SwarmRepository.drain_steps`), each head cut as its ask says."""
    cuts: dict[int, tuple[list[StoredMessage], list[str]]] = {}

    def choose(i: int, due: list[StoredMessage]) -> list[str]:
        read = asks[i].next
        if read is None:
            return []
        cuts[i] = read.cut(due)
        return [m.msg_id for m in cuts[i][0]]

    steps = [
        DrainStep(
            a.target, a.now_ms,
            handed_off=None if a.handed_off is None else (
                a.handed_off.msg_ids, a.handed_off.now_ms, a.handed_off.verify_by,
                a.handed_off.mode,
            ),
            released=a.released, read_limit=0 if a.next is None else a.next.limit,
        )
        for a in asks
    ]  # fmt: skip
    answers = []
    for i, result in enumerate(repo.drain_steps(steps, choose)):
        claimed = set(result.claimed)
        kept = [(m, t) for m, t in zip(*cuts.get(i, ([], [])), strict=True) if m.msg_id in claimed]
        answers.append(
            StepAnswer(result.handed_off, result.due, [m for m, _ in kept], [t for _, t in kept])
        )
    return answers
