"""One target's drain: its due messages handed to its runtime a batch at a time, in order.

The arbiter (:mod:`pigeond.delivery.arbiter`) decides *which* targets to drain and keeps
at most one drain in flight per target; this is *what one drain does*, the same for
every runtime (:mod:`pigeond.delivery.runtime`), in named steps:

1. :meth:`TargetDrain._next_batch`: the due head of the queue, bounded by ``batch_max``
   and ``batch_max_bytes``, once no message of it is in doubt (a crash during its last
   hand-off, ended from the transcript: :mod:`pigeond.delivery.recovery`);
2. the runtime prepares (an opencode session's directory checked, its running turn
   waited out, its mode asked for); a wait makes the drain read the queue again;
3. :meth:`TargetDrain._may_still_send`: not stopping, the database still the one opened,
   the target's lock (several daemons on one PostgreSQL) still ours;
4. the intent is committed, then the runtime hands the batch off;
5. the outcome is written (:mod:`pigeond.delivery.outcomes`), and the runtime waits
   until the target may take the next batch (the turn the prompt started ended); on a
   runtime that steers, a steering batch come meanwhile ends that wait
   (:mod:`pigeond.delivery.steering`).

A database that cannot be read pauses the drain until a later tick: it is not the
delivery's failure, so no attempt is spent on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from twisted.internet.defer import CancelledError, Deferred, DeferredList, succeed
from twisted.logger import Logger

from pigeond.delivery.failures import HandOffError
from pigeond.delivery.grouping import Cut, Grouped, NextRead, ReadyAsk, StepAnswer, StepAsk
from pigeond.delivery.outcomes import DrainState, HandOffOutcomes
from pigeond.delivery.policy import DeliveryPolicy, within_bytes
from pigeond.delivery.recovery import HandOffRecovery
from pigeond.delivery.routing import Routing
from pigeond.delivery.runtime import AgentRuntime, Delivery, Prepared, Runtimes
from pigeond.delivery.steering import asks_to_steer, same_ask
from pigeond.model import StoredMessage
from pigeond.storage import StorageError

T = TypeVar("T")
log = Logger(namespace="pigeond.delivery.arbiter")  # one story in the logs with the arbiter's


class TargetLocks(Protocol):
    """Exclusivity of a target's drain across daemons sharing one database (PostgreSQL:
    pigeond/storage/postgres/locks.py); none is needed on a SQLite file, which one
    daemon alone may open."""

    def acquire(self, target: str) -> Deferred[bool]:
        """Take the target's lock; False when another daemon holds it."""
        ...

    def held(self, target: str) -> Deferred[bool]:
        """Whether the lock taken is still ours (its connection alive)."""
        ...

    def release(self, target: str) -> Deferred[None]: ...


def _passing(result: T, ended: Deferred[None]) -> T:
    """Fires ``ended`` and passes ``result`` (or its failure) on, untouched."""
    if not ended.called:
        ended.callback(None)
    return result


# A batch claimed ahead (its intent committed with the previous hand-off's record) still
# goes if its target is ready for it within this long; later, what a wait let come (an
# urgent message, an operator's cancel) is read again first.
AHEAD_FRESH_MS: Final = 50


@dataclass(frozen=True, slots=True)
class Batch:
    """The due head of a queue, its envelopes, whether more may be due behind it (a
    bound cut it), and whether its messages ask to steer (all of them, or none).
    ``claimed_at``: when its intent was committed with its read (ms); None: not yet."""

    messages: list[StoredMessage]
    texts: list[str]
    more: bool
    steer: bool = False
    claimed_at: int | None = None

    @property
    def claimed(self) -> tuple[str, ...]:
        """The ids whose intent this drain committed ahead of the call."""
        return () if self.claimed_at is None else tuple(m.msg_id for m in self.messages)


class TargetDrain:
    """Draining one target at a time, through its runtime (one per target at once: the
    arbiter's ``_in_flight`` sees to that)."""

    def __init__(
        self,
        state: DrainState,
        outcomes: HandOffOutcomes,
        runtimes: Runtimes,
        ready_reads: Grouped[ReadyAsk, list[StoredMessage]],
        steps: Grouped[StepAsk, StepAnswer],
        recovery: HandOffRecovery,
        policy: Callable[[], DeliveryPolicy],
        *,
        database_vanished: Callable[[], bool],
        target_locks: TargetLocks | None = None,
        routing: Routing | None = None,
        steer_allowed: Callable[[str], Deferred[bool]] = lambda target: succeed(False),
    ) -> None:
        """``policy`` gives the settings in force; ``database_vanished`` whether the
        database file is no longer the one opened (logged once where it is told);
        ``steer_allowed`` whether a target's policy allows steering (read at each
        steering batch's hand-off)."""
        self._state = state
        self._outcomes = outcomes
        self._runtimes = runtimes
        self._ready_reads = ready_reads
        self._steps = steps
        self._recovery = recovery
        self._policy = policy
        self._database_vanished = database_vanished
        self._target_locks = target_locks
        self._routing = routing
        self._steer_allowed = steer_allowed

    async def drain(self, target: str) -> None:
        """Hand off ``target``'s due messages, a batch at a time, until none is due, one
        fails, or its runtime cannot take one now."""
        runtime = self._runtimes.of(target)
        if not runtime.may_take_now(target):
            return  # a pull runtime nobody asks for now: its messages wait, untouched
        locks = self._target_locks
        try:
            if self._routing is not None and not await self._routing.mine(target):
                return  # another daemon's opencode has it (or none has, yet)
            if locks is not None and not await locks.acquire(target):
                return  # another daemon drains it; the tick asks again
            try:
                await self._batches(target, runtime)
            finally:
                if locks is not None:
                    await locks.release(target)
        except StorageError as e:
            # a full disk fails every tick's intent write: say so once, not twenty times a second
            if not self._state.closed and self._state.paused.get(target) != str(e):
                log.error("delivery to {target} paused: {error}; trying again every tick",
                          target=target, error=str(e))  # fmt: skip
            self._state.paused[target] = str(e)
        else:
            self._state.paused.pop(target, None)

    def _cut(self, target: str) -> Cut:
        """How a due head is cut to one batch: ``batch_max_bytes`` of envelopes, and on a
        runtime that steers, where its messages stop asking what its head asks."""
        max_bytes = self._policy().batch_max_bytes
        steers = self._runtimes.of(target).steers

        def cut(due: list[StoredMessage]) -> tuple[list[StoredMessage], list[str]]:
            messages, texts = within_bytes(due, max_bytes)
            if steers:
                messages, texts, _ = same_ask(messages, texts)
            return messages, texts

        return cut

    def _next_read(self, target: str) -> NextRead:
        self._state.kicked_in_flight.discard(target)  # this read sees what was kicked so far
        return NextRead(self._policy().batch_max, self._cut(target))

    def _claimed(self, target: str, answer: StepAnswer, now_ms: int) -> Batch | None:
        """The batch a step read and claimed; None when its head holds a message in doubt
        (nothing claimed: the doubt is ended first, :meth:`_next_batch`)."""
        if answer.due and not answer.messages:
            return None
        messages, texts, due = answer.messages, answer.texts, answer.due
        more = len(due) >= self._policy().batch_max or len(messages) < len(due)
        steer = self._runtimes.of(target).steers and same_ask(messages, texts)[2]
        return Batch(messages, texts, more, steer, claimed_at=now_ms)

    async def _next_batch(self, target: str, released: tuple[str, ...] = ()) -> Batch:
        """The due head of the queue, bounded by ``batch_max`` and ``batch_max_bytes``, read
        and claimed (its intent committed) in one trip to the writer, which also clears
        ``released`` (intents claimed ahead for a batch that did not go).  A head with a
        message in doubt (a crash during its hand-off) is looked for in the transcript
        first, then read again and claimed before the call (:meth:`_hand_off`)."""
        now_ms = self._outcomes.now_ms()
        read = self._next_read(target)
        answer = await self._steps(StepAsk(target, now_ms, released=released, next=read))
        claimed = self._claimed(target, answer, now_ms)
        if claimed is not None:
            return claimed
        policy = self._policy()

        def read_again() -> Deferred[list[StoredMessage]]:
            return self._ready_reads(ReadyAsk(target, self._outcomes.now_ms(), policy.batch_max))

        due = await self._recovery.settled(target, answer.due, read_again, policy.outage_retry_s)
        messages, texts = read.cut(due)
        steer = False
        if self._runtimes.of(target).steers:
            messages, texts, steer = same_ask(messages, texts)
        more = len(due) >= policy.batch_max or len(messages) < len(due)
        return Batch(messages, texts, more, steer)

    async def _release(self, target: str, batch: Batch) -> None:
        """Clear the intents claimed for ``batch``, which did not go; left to the doubt's
        check (the transcript) when the database is closing or cannot write."""
        if not batch.claimed or self._state.closed:
            return
        try:
            await self._steps(StepAsk(target, self._outcomes.now_ms(), released=batch.claimed))
        except StorageError as e:
            log.warn("{msg_ids} to {target}: their intent could not be cleared ({error}); they"
                     " are looked for in the transcript before they go", msg_ids=batch.claimed,
                     target=target, error=str(e))  # fmt: skip

    async def _may_still_send(self, target: str) -> bool:
        """Whether nothing since the batch was read forbids sending it: pigeond stopping,
        the database file replaced, the target's lock lost with its connection."""
        if self._state.stopping or self._database_vanished():
            return False  # nothing was sent; the messages stay queued
        if self._target_locks is not None and not await self._target_locks.held(target):
            log.warn("{target}: its lock died with its connection: another daemon"
                     " may deliver to it now; nothing sent", target=target)  # fmt: skip
            return False
        return True

    async def _batches(self, target: str, runtime: AgentRuntime) -> None:
        """The queue is read again after a hand-off only if something may be due there:
        a bound cut the batch, or the target was kicked meanwhile (a send, a requeue, the
        tick); otherwise that read would find nothing.  (What comes without a kick, from
        another process, waits for the tick.)  That read, and the next batch's intent, go
        with the hand-off's record, in its transaction (:meth:`_hand_off`)."""
        if target in self._state.unrecorded and not await self._outcomes.retry_record(target):
            return
        batch: Batch | None = await self._next_batch(target)
        while batch is not None and batch.messages:
            if self._state.stopping:
                await self._release(target, batch)
                return
            handed = await self._hand_off(target, runtime, batch)
            if handed is None:
                return
            prepared, ahead = handed
            await self._after_hand_off(target, runtime, prepared)
            if ahead is not None and ahead.messages:
                batch = ahead
            elif (ahead is None and batch.more) or target in self._state.kicked_in_flight:
                batch = await self._next_batch(target) if not self._state.stopping else None
            else:
                batch = None

    async def _after_hand_off(self, target: str, runtime: AgentRuntime, handed: Prepared) -> None:
        """The runtime's wait until the target may take the next batch.  On a runtime that
        steers, each kick meanwhile looks at the queue's head: one that would steer ends
        the wait (the runtime's wait is cancelled), and goes into the turn still running."""
        if not runtime.steers:  # nothing ends the wait early: the runtime's own, awaited
            await runtime.after_hand_off(target, handed)
            return
        waiting = Deferred.fromCoroutine(runtime.after_hand_off(target, handed))
        ended: Deferred[None] = Deferred()
        waiting.addBoth(_passing, ended)
        kicks = self._state.kicks
        # each wait for a kick is taken before the look that may miss it; a kick since the
        # batch was read (before any wait was taken) makes a first look at once
        kicked = kicks.next(target)
        look = target in self._state.kicked_in_flight
        try:
            while not waiting.called:
                if not look:
                    await DeferredList([ended, kicked], fireOnOneCallback=True)
                    kicked = kicks.next(target)
                look = False
                if not waiting.called and await self._steer_due(target):
                    waiting.cancel()
        finally:
            kicks.forget(target)
            if not waiting.called:  # the look failed (the database): the wait ends with it
                waiting.addErrback(lambda failure: failure.trap(CancelledError) and None)
                waiting.cancel()
        await waiting

    async def _steer_due(self, target: str) -> bool:
        """Whether the head of the queue would go as a steer now."""
        due = await self._ready_reads(ReadyAsk(target, self._outcomes.now_ms(), 1))
        steers = bool(due) and asks_to_steer(due[0])
        return steers and not self._state.stopping and await self._steer_allowed(target)

    async def _delivery(self, target: str, runtime: AgentRuntime, batch: Batch) -> Delivery:
        """STEER for a batch that asks it on a runtime that steers, to a target whose
        policy allows it now; otherwise QUEUE."""
        if batch.steer and runtime.steers and await self._steer_allowed(target):
            return Delivery.STEER
        return Delivery.QUEUE

    def _stale(self, batch: Batch) -> bool:
        """Whether a batch claimed ahead waited too long for its target to be ready."""
        at = batch.claimed_at
        return at is not None and self._outcomes.now_ms() - at > AHEAD_FRESH_MS

    async def _hand_off(
        self, target: str, runtime: AgentRuntime, batch: Batch
    ) -> tuple[Prepared, Batch | None] | None:
        """Steps 2 to 5 for one batch; what the runtime prepared when the batch was handed
        off and recorded, with the next batch read and claimed in the record's transaction
        (None: not read, or its head in doubt), else None (nothing more goes to ``target``
        in this drain; a batch claimed and not sent has its intents cleared)."""
        outcomes = self._outcomes
        messages = batch.messages
        calling = False  # whether the runtime was asked: before that, nothing may have gone
        try:
            prepared = await runtime.prepare(target)
            if prepared is None or self._state.stopping:
                await self._release(target, batch)
                return None
            if prepared.waited or self._stale(batch):
                # messages may have come (more urgent ones too) while the runtime waited
                batch = await self._next_batch(target, released=batch.claimed)
                messages = batch.messages
                if not messages:
                    return None
            if not await self._may_still_send(target):
                await self._release(target, batch)
                return None
            texts = batch.texts
            if batch.claimed_at is None:
                messages, texts = await self._recovery.record(batch.messages, batch.texts)
                if not messages:  # cancelled meanwhile: the next ones, if any
                    batch = await self._next_batch(target)
                    return await self._hand_off(target, runtime, batch) if batch.messages else None
            delivery = await self._delivery(target, runtime, batch)
            calling = True
            mode = await runtime.hand_off(target, prepared, texts, delivery=delivery)
        except HandOffError as e:
            if outcomes.ended_late(target, messages, f"failed: {e}"):
                return None
            if not calling:  # failed getting ready: its intents never stood for a call
                await self._release(target, batch)
            await outcomes.record_failure(target, messages, e)
            return None
        except StorageError:
            raise  # reading the queue again failed: nothing was sent
        except Exception:
            # a bug of ours, not the delivery's: never charged to the messages
            log.failure("delivery to {target} hit an error", target=target)
            if not calling:
                await self._release(target, batch)
            outcomes.metrics.failures.labels("internal").inc()
            outcomes.hold(target, messages, "an internal error (see the traceback above)")
            return None
        outcomes.count_hand_off(messages)
        if outcomes.ended_late(target, messages, f"taken by {runtime.name}"):
            return None
        seen = runtime.transcripts is None  # nothing to verify it in: it was seen when made
        # the next head, read and claimed with the record, unless nothing may be due there or
        # the runtime may steer into the turn this prompt starts (that waits for a kick)
        ahead = not runtime.steers and (batch.more or target in self._state.kicked_in_flight)
        then = self._next_read(target) if ahead and not self._state.stopping else None
        answer = await outcomes.record_hand_off(target, messages, mode, seen=seen, then=then)
        if answer is None:
            return None
        return prepared, None if then is None else self._claimed(target, answer, outcomes.now_ms())
