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


def record_hand_offs(repo: SwarmRepository, records: Sequence[HandOffRecord]) -> list[list[str]]:
    """Every record's hand-off in one transaction and one commit
    (:meth:`~SwarmRepository.mark_handed_off_groups`); a record alone as
    :meth:`~SwarmRepository.mark_handed_off_many` records it."""
    if len(records) == 1:
        [r] = records
        return [repo.mark_handed_off_many(r.msg_ids, r.now_ms, r.verify_by, r.mode)]
    return repo.mark_handed_off_groups(
        [(r.msg_ids, r.now_ms, r.verify_by, r.mode) for r in records]
    )
