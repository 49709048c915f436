"""What the arbiter writes once a hand-off has ended: taken by opencode (and counted), or
failed (and what :func:`~pigeond.delivery.policy.decide_retry` says follows).

The arbiter and its drains (:mod:`pigeond.delivery.drain`) decide *when* to hand off;
this records *what happened*, whatever the runtime.
The database may refuse to record it (disk full): a prompt opencode took is then kept
in memory as an :class:`UnrecordedHandOff` and its target held, so the same messages
are never prompted again while the record is missing; a failure that cannot be written
holds its target for the wait it would have had.

Every outcome written clears the hand-off's intent (see :mod:`pigeond.delivery.recovery`),
but one: a prompt that got no answer within the deadline may have been taken, so its
retry looks for it in the transcript first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pigeond.delivery.failures import FailureKind, HandOffError
from pigeond.delivery.grouping import Grouped, HandOffRecord, NextRead, StepAnswer, StepAsk
from pigeond.delivery.metrics import DeliveryMetrics
from pigeond.delivery.opencode_client import DeadlineExceeded, OpencodeError, SessionNotFound
from pigeond.delivery.policy import (
    DeliveryPolicy,
    Next,
    RetryDecision,
    UnrecordedHandOff,
    decide_retry,
)
from pigeond.delivery.prompting import describe_mode
from pigeond.delivery.registry import DirectoryResolver
from pigeond.delivery.steering import Kicks
from pigeond.model import NO_MODE, HandoffMode, StoredMessage
from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.database import Database

log = Logger(namespace="pigeond.delivery.arbiter")  # one story in the logs with the arbiter's


@dataclass
class DrainState:
    """What the arbiter, its drains and the outcome writer share, by target: one object
    that all three are given, so none sets attributes of another."""

    # hand-offs a runtime took that the database has not recorded yet
    unrecorded: dict[str, UnrecordedHandOff] = field(default_factory=dict)
    # targets whose failure could not be recorded either: held in memory until then
    held_until_ms: dict[str, int] = field(default_factory=dict)
    # targets tried in the outage of opencode under way, and until when (ms) nothing more
    # goes to them unless it ends; in memory, so its end lets them all go at once
    waiting_for_opencode: dict[str, int] = field(default_factory=dict)
    # targets kicked while their drain was under way: it reads their queue once more
    kicked_in_flight: set[str] = field(default_factory=set)
    # the same kicks, heard by a drain waiting after a hand-off (a steer may end its wait)
    kicks: Kicks = field(default_factory=Kicks)
    # a drain's database error, logged once per target
    paused: dict[str, str] = field(default_factory=dict)
    stopping: bool = False  # set by Arbiter.stop; a drain reads it again after every wait
    closed: bool = False  # the database is closed (or about to be): nothing is written


class HandOffOutcomes:
    """Recording a hand-off's outcome."""

    def __init__(
        self,
        db: Database,
        hand_off_writes: Grouped[StepAsk, StepAnswer],
        state: DrainState,
        policy: Callable[[], DeliveryPolicy],
        registry: DirectoryResolver,
        metrics: DeliveryMetrics,
        clock: IReactorTime,
        opencode_down: Callable[[], bool],
    ) -> None:
        """``policy`` gives the settings in force (a reload changes them);
        ``registry`` confirms an opencode session gone before its 404 fails messages."""
        self._db = db
        self._hand_off_writes = hand_off_writes
        self._state = state
        self._policy_now = policy
        self._registry = registry
        self.metrics = metrics
        self._clock = clock
        self._opencode_down = opencode_down

    @property
    def _policy(self) -> DeliveryPolicy:
        return self._policy_now()

    def now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    # -- scheduling ------------------------------------------------------------

    def ended_late(self, target: str, batch: list[StoredMessage], outcome: str) -> bool:
        """A hand-off that ends after :meth:`close` must not write: the database is closed
        (or about to be).  Its messages stay queued for the next start."""
        if not self._state.closed:
            return False
        log.info("{msg_ids} to {target} {outcome} after pigeond stopped; left queued",
                      msg_ids=[m.msg_id for m in batch], target=target,
                      outcome=outcome)  # fmt: skip
        return True

    def count_hand_off(self, batch: list[StoredMessage]) -> None:
        now_ms = self.now_ms()
        self.metrics.hand_offs.inc()
        self.metrics.messages_handed_off.inc(len(batch))
        for message in batch:
            self.metrics.accept_to_hand_off.observe(max(0, now_ms - message.created_at) / 1000)

    async def record_hand_off(
        self,
        target: str,
        batch: list[StoredMessage],
        mode: HandoffMode = NO_MODE,
        *,
        seen: bool = False,
        then: NextRead | None = None,
    ) -> StepAnswer | None:
        """Record a batch its runtime took; if the database cannot, keep it in memory and
        hold ``target`` until it can (None): sending the batch again would run another
        turn.  ``seen``: the runtime has no transcript to verify it in (a pull-only member
        read it through pigeond itself), so it is seen now.  ``then``: the target's next
        head is read and claimed in the same transaction (one trip for the drain's step)."""
        now_ms = self.now_ms()
        verify_by = now_ms + int(self._policy.verify_grace_s * 1000)
        ids = [m.msg_id for m in batch]
        record = HandOffRecord(tuple(ids), now_ms, verify_by, mode)
        try:
            answer = await self._hand_off_writes(StepAsk(target, now_ms, record, next=then))
        except StorageError as e:
            self._state.unrecorded[target] = UnrecordedHandOff(
                target, tuple(ids), now_ms, verify_by, mode, str(e)
            )
            log.error(
                "handed off {msg_ids} to {target} but could not record it: {error};"
                " holding {target} and trying to record it every tick",
                msg_ids=ids, target=target, error=str(e),
            )  # fmt: skip
            return None
        self._log_handed_off(target, ids, mode)
        if seen:
            try:
                await self._db.write(SwarmRepository.mark_verified, ids, now_ms)
            except StorageError as e:  # the verifier would never see it: said, not retried
                log.error("{msg_ids} handed off to {target} could not be marked seen: {error}",
                          msg_ids=ids, target=target, error=str(e))  # fmt: skip
        return answer

    async def retry_record(self, target: str) -> bool:
        """Try again to record ``target``'s unrecorded hand-off, as of when it happened."""
        pending = self._state.unrecorded[target]
        try:
            await self._db.write(
                SwarmRepository.mark_handed_off_many,
                list(pending.msg_ids), pending.at_ms, pending.verify_by, pending.mode,
            )  # fmt: skip
        except StorageError:
            return False
        if self._state.unrecorded.get(target) is not pending:
            return True  # recorded meanwhile by another caller
        del self._state.unrecorded[target]
        late_s = (self.now_ms() - pending.at_ms) / 1000
        log.info("recorded the hand-off of {msg_ids} to {target}, {s:.1f} s late",
                      msg_ids=list(pending.msg_ids), target=target, s=late_s)  # fmt: skip
        self._log_handed_off(target, list(pending.msg_ids), pending.mode)
        return True

    def _log_handed_off(self, target: str, ids: list[str], mode: HandoffMode) -> None:
        described = describe_mode(mode)  # the batch's: said on each message's line
        for msg_id in ids:
            log.info("handed off {msg_id} to {target} (batch of {n}; {mode})",
                          msg_id=msg_id, target=target, n=len(ids), mode=described)  # fmt: skip

    async def record_failure(
        self, target: str, batch: list[StoredMessage], error: HandOffError
    ) -> None:
        """Write what follows a failed hand-off (:func:`decide_retry`); if the database cannot,
        hold ``target`` in memory for the wait it would have had: without a hold the next
        tick would prompt again at once."""
        kind, text = error.kind, str(error) or repr(error)
        if kind is FailureKind.NOT_TAKEN:
            await self._not_taken(target, batch, text)
            return
        self.metrics.failures.labels(kind.value).inc()
        if isinstance(error, SessionNotFound):
            confirmed = await self._confirm_gone(target)
            text = f"session not found: {text}"
            if confirmed is None:
                self.hold(target, batch, text)
                return
            kind = confirmed
            if self.ended_late(target, batch, f"failed: {text}"):
                return
        now_ms = self.now_ms()
        decisions = [decide_retry(kind, m.attempts, now_ms, self._policy) for m in batch]
        try:
            await self._write_failure(
                target, batch, kind, text, decisions, isinstance(error, DeadlineExceeded)
            )
        except StorageError as e:
            hold_until = min(d.retry_at_ms or now_ms for d in decisions)
            self._state.held_until_ms[target] = hold_until
            log.error(
                "{msg_ids} to {target} failed ({failure}) and the failure could not be"
                " recorded: {error}; holding {target} for {s} s",
                msg_ids=[m.msg_id for m in batch], target=target, failure=text, error=str(e),
                s=(hold_until - now_ms) / 1000,
            )  # fmt: skip

    async def _not_taken(self, target: str, batch: list[StoredMessage], text: str) -> None:
        """A pull runtime's session stopped asking before the batch was given to it: the
        messages stay due, nothing spent; only their intent is cleared (nothing went)."""
        ids = [m.msg_id for m in batch]
        now_ms = self.now_ms()
        try:
            await self._db.write(SwarmRepository.record_outage, ids, text, now_ms, now_ms)
        except StorageError as e:
            log.warn("{msg_ids} to {target} were not taken ({why}); could not record it:"
                     " {error}", msg_ids=ids, target=target, why=text, error=str(e))  # fmt: skip
            return
        log.info("{msg_ids} to {target} not taken: {why}; they wait for its next ask",
                 msg_ids=ids, target=target, why=text)  # fmt: skip

    def wait_for_opencode(self, target: str) -> None:
        """Hold ``target`` until the outage of opencode ends, or for ``outage_retry_s``."""
        until = self.now_ms() + int(self._policy.outage_retry_s * 1000)
        self._state.waiting_for_opencode[target] = until

    def hold(self, target: str, batch: list[StoredMessage], why: str) -> None:
        """Not a delivery failure (a bug of ours, logged with its traceback where it was
        caught): spend no attempt and write nothing; hold ``target`` for outage_retry_s."""
        self._state.held_until_ms[target] = self.now_ms() + int(self._policy.outage_retry_s * 1000)
        log.warn("{msg_ids} to {target} held for {s} s, no attempt spent: {why}",
                      msg_ids=[m.msg_id for m in batch], target=target,
                      s=self._policy.outage_retry_s, why=why)  # fmt: skip

    async def _write_failure(
        self,
        target: str,
        batch: list[StoredMessage],
        kind: FailureKind,
        text: str,
        decisions: list[RetryDecision],
        may_have_arrived: bool = False,
    ) -> None:
        now_ms = self.now_ms()
        ids = [m.msg_id for m in batch]
        if kind is FailureKind.OUTAGE and self._opencode_down():
            # opencode itself is gone: due at once, the target held in memory until it
            # answers (or outage_retry_s passes); the outage is logged once, and probed,
            # by reachability
            self.wait_for_opencode(target)
            await self._db.write(SwarmRepository.record_outage, ids, text, now_ms, now_ms)
            log.debug("{msg_ids} to {target} wait for opencode ({error}), no attempt spent",
                      msg_ids=ids, target=target, error=text)  # fmt: skip
            return
        if kind is FailureKind.OUTAGE:
            hold_until = decisions[0].retry_at_ms
            assert hold_until is not None
            await self._db.write(SwarmRepository.record_outage, ids, text, now_ms, hold_until)
            log.info("{target} unreachable ({error}); holding {n} message(s), retry in {s} s",
                          target=target, error=text, n=len(ids),
                          s=self._policy.outage_retry_s)  # fmt: skip
            return
        if kind is FailureKind.PERMANENT:
            await self._db.write(SwarmRepository.fail_now, ids, text, now_ms)
            log.warn("{msg_ids} to {target} failed for good: {error}",
                          msg_ids=ids, target=target, error=text)  # fmt: skip
            return
        for message, decision in zip(batch, decisions, strict=True):
            retry_at = decision.retry_at_ms if decision.next is Next.RETRY else None
            await self._db.write(
                SwarmRepository.record_failed_attempt, message.msg_id, text, now_ms, retry_at,
                may_have_arrived=may_have_arrived,
            )  # fmt: skip
            log.info("{msg_id} to {target}: attempt {attempts} failed ({error}); {next}",
                          msg_id=message.msg_id, target=target, attempts=message.attempts + 1,
                          error=text, next="failed for good" if retry_at is None
                          else f"retry in {retry_at - now_ms} ms")  # fmt: skip

    async def _confirm_gone(self, target: str) -> FailureKind | None:
        """A 404 is permanent only if a fresh lookup agrees the session is gone; None when
        the lookup itself hit a bug (logged)."""
        self._registry.invalidate(target)
        try:
            await self._registry.resolve(target)
        except SessionNotFound:
            return FailureKind.PERMANENT
        except OpencodeError as e:
            return e.kind
        except Exception:
            log.failure("looking {target} up again failed", target=target)
            return None
        return FailureKind.ATTEMPT
