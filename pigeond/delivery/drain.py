"""One target's drain: its due messages handed to opencode a batch at a time, in order.

A part of :class:`~pigeond.delivery.arbiter.Arbiter`, kept apart so each file reads as
one concern: the arbiter decides *which* targets to drain and keeps at most one drain
in flight per target; this is *what one drain does*.  Each batch is the due head of
the queue, bounded by ``batch_max`` and ``batch_max_bytes``; before it is sent the
target's directory is checked, in ``turn`` delivery its running turn waited out, its
mode asked for and the intent committed (:mod:`pigeond.delivery.recovery`); after it,
the outcome is written (:mod:`pigeond.delivery.outcomes`) and, in ``turn`` delivery,
the turn the prompt started waited for, so the next prompt never lands in a running
turn.  A database that cannot be read pauses the drain until a later tick: it is not
the delivery's failure, so no attempt is spent on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger

from pigeond.delivery.grouping import Grouped, ReadyAsk
from pigeond.delivery.opencode_client import FailureKind, OpencodeError
from pigeond.delivery.outcomes import HandOffOutcomes
from pigeond.delivery.policy import within_bytes
from pigeond.delivery.prompting import ModeAwarePrompter, handoff_mode
from pigeond.delivery.recovery import HandOffRecovery
from pigeond.delivery.routing import Routing
from pigeond.delivery.turns import TURN_ENDED, TurnMark, TurnTracker
from pigeond.model import StoredMessage
from pigeond.storage import StorageError

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


class TargetDrain(HandOffOutcomes):
    """Draining one target; mixed into the Arbiter, which sets these."""

    _ready_reads: Grouped[ReadyAsk, list[StoredMessage]]
    _recovery: HandOffRecovery
    _prompter: ModeAwarePrompter
    _turns: TurnTracker | None
    _check_directory: Callable[[str], str | None]
    _kicked_in_flight: set[str]
    _turn_waits: set[Deferred[str]]
    _paused: dict[str, str]
    _stopping: bool
    _target_locks: TargetLocks | None
    _routing: Routing | None
    # whether the database file is no longer the one opened (logged once)
    _database_vanished: Callable[[], bool]

    @property
    def stopping(self) -> bool:
        """Set by :meth:`~pigeond.delivery.arbiter.Arbiter.stop`; a drain reads it again
        after every wait."""
        return self._stopping

    async def _next_batch(self, target: str) -> tuple[list[StoredMessage], list[str], bool]:
        """The due head of the queue, bounded by ``batch_max`` and ``batch_max_bytes``, and
        whether more may be due behind it (a bound cut the batch)."""
        self._kicked_in_flight.discard(target)  # this read sees what was kicked so far

        def read() -> Deferred[list[StoredMessage]]:
            return self._ready_reads(ReadyAsk(target, self._now_ms(), self._policy.batch_max))

        # a message in doubt (a crash during its hand-off) is looked for in the transcript
        due = await self._recovery.settled(target, await read(), read, self._policy.outage_retry_s)
        batch, texts = within_bytes(due, self._policy.batch_max_bytes)
        return batch, texts, len(due) >= self._policy.batch_max or len(batch) < len(due)

    async def _drain(self, target: str) -> None:
        """Hand off ``target``'s due messages, a batch at a time, until none is due or one
        fails.  A database that cannot be read pauses the drain until a later tick: it is
        not the delivery's failure, so no attempt is spent on it."""
        locks = self._target_locks
        try:
            if self._routing is not None and not await self._routing.mine(target):
                return  # another daemon's opencode has it (or none has, yet)
            if locks is not None and not await locks.acquire(target):
                return  # another daemon drains it; the tick asks again
            try:
                await self._drain_batches(target)
            finally:
                if locks is not None:
                    await locks.release(target)
        except StorageError as e:
            # a full disk fails every tick's intent write: say so once, not twenty times a second
            if not self._closed and self._paused.get(target) != str(e):
                log.error("delivery to {target} paused: {error}; trying again every tick",
                               target=target, error=str(e))  # fmt: skip
            self._paused[target] = str(e)
        else:
            self._paused.pop(target, None)

    async def _drain_batches(self, target: str) -> None:
        """The queue is read again after a hand-off only if something may be due there:
        a bound cut the batch, or the target was kicked meanwhile (a send, a requeue, the
        tick); otherwise that read would find nothing.  (What comes without a kick, from
        another process, waits for the tick.)"""
        if target in self._unrecorded and not await self._retry_record(target):
            return
        more = True
        while more and not self._stopping:
            batch, texts, more = await self._next_batch(target)
            if not batch:
                return
            try:
                directory = await self._registry.resolve(target)
                problem = self._check_directory(directory)
                if problem is not None:
                    raise OpencodeError(problem, kind=FailureKind.OUTAGE)
                if self._turns is not None:
                    waited_from = self._clock.seconds()
                    known_idle = self._turns.known_idle(target)
                    why = await self._turns.wait_until_idle(target, directory)
                    self.metrics.turn_wait.observe(self._clock.seconds() - waited_from)
                    if why != "idle":
                        log.warn("{target}: {why}", target=target, why=why)
                    if self.stopping:
                        return
                    if not known_idle:
                        # messages may have come (more urgent ones too) while we waited
                        batch, texts, more = await self._next_batch(target)
                        if not batch:
                            return
                mode, note = await self._prompter.mode(target, directory)
                if self.stopping or self._database_vanished():
                    return  # nothing was sent; the messages stay queued
                if self._target_locks is not None and not await self._target_locks.held(target):
                    log.warn("{target}: its lock died with its connection: another daemon"
                             " may deliver to it now; nothing sent", target=target)  # fmt: skip
                    return
                batch, texts = await self._recovery.record(batch, texts)  # before the call
                if not batch:
                    continue  # cancelled meanwhile
                mark = self._turns.mark(target) if self._turns is not None else None
                mode, note = await self._prompter.send(target, directory, texts, mode, note)
            except OpencodeError as e:
                if self._ended_late(target, batch, f"failed: {e}"):
                    return
                await self._record_failure(target, batch, e)
                return
            except StorageError:
                raise  # reading the queue again failed: nothing was sent
            except Exception:
                # a bug of ours, not the delivery's: never charged to the messages
                log.failure("delivery to {target} hit an error", target=target)
                self.metrics.failures.labels("internal").inc()
                self._hold(target, batch, "an internal error (see the traceback above)")
                return
            self._count_hand_off(batch)
            if self._ended_late(target, batch, "taken by opencode"):
                return
            if not await self._record_hand_off(target, batch, handoff_mode(mode, note)):
                return
            if self._turns is not None and mark is not None:
                await self._wait_turn_end(target, directory, mark)
            more = more or target in self._kicked_in_flight

    async def _wait_turn_end(self, target: str, directory: str, mark: TurnMark) -> None:
        assert self._turns is not None
        wait = Deferred.fromCoroutine(self._turns.wait_turn_end(target, directory, mark))
        self._turn_waits.add(wait)
        try:
            why = await wait
        except CancelledError:
            return
        finally:
            self._turn_waits.discard(wait)
        # the usual end is a debug line (one per hand-off, the hand-off's own line says
        # enough); a wait cut short by a timeout explains a delay: info
        level = log.debug if why == TURN_ENDED else log.info
        level("{target}: {why}", target=target, why=why)
