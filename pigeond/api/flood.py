"""The flood guard: the admission around the store that bounds what a runaway agent loop can queue.

Every accepted message becomes a prompt in its target's session, so a loop that
sends without pause would bury that session and fill the disk.  These limits, each
answered with nothing stored and ``Retry-After``, each off at 0:

* ``max_queued_per_target`` (429): queued messages per target, counted in the
  database (the truth survives restarts and sees every sender).  The queue
  drains as the target's turns end, which no sender can predict, so the answer
  is a fixed :data:`TARGET_FULL_RETRY_AFTER_S`.  A channel send is never
  refused for it: the store applies the cap to each member's copy, and a member
  at its cap is left out of that message (the 202's ``skipped``) rather than
  the channel's other members.  A channel send that no member would get is
  refused by the store (a 409 from the route: nothing to deliver, nothing stored).
* ``max_queued_bytes`` (507): the payload bytes of every undelivered message,
  each channel copy counted, with the send's own copies
  (pigeond/storage/queue_bytes.py), taken in the store's transaction like the
  target's count; :data:`QUEUE_FULL_RETRY_AFTER_S`.
* two token buckets (429), both charged for every send
  (pigeond/api/buckets.py): one per ``from`` field (``sender_rate_per_s`` /
  ``sender_burst``), which stops a loop in one session; and one per caller
  (``caller_rate_per_s`` / ``caller_burst``), the process the kernel names
  (:func:`pigeond.api.callers.caller_of`: the agent that started the client, a
  login session, or every TCP client as one), which a sender cannot change by
  writing another ``from``.  A channel message costs one token per copy stored.
  ``Retry-After`` is the whole seconds until a token is back.

A retried send whose msg_id is already stored passes untouched: the repository
answers it as a duplicate (or a conflict) and stores nothing, and refusing it
would make a client that lost a 202 believe its message was never taken.

How, at the cost of nothing but dict lookups for a send that passes (no trip to a
database thread): one token of each bucket is spent on the reactor thread before the
store, so two sends of one sender cannot spend the same token, and given back when the
store did not store (a retry, a conflict, a full target or queue, a channel nobody
would get, a failed commit).  A stored channel message then costs the rest of its
copies, counted by one read, and may leave its buckets in debt.  The target's count and
the queue's bytes are taken by the store itself, in the transaction that would insert the
row (:class:`QueueLimits <pigeond.storage.repository.QueueLimits>`), after its msg_id
check: a retry is answered as before, and concurrent sends can never push a target or
the queue past its bound.  Only a send without a token waits for a read, to learn
whether it is a retry of a stored msg_id.  While a send's store is under way its token is
spent, so a second send at the very edge of its bucket may be refused though the first
then stores nothing: the guard errs on the side of the limit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, NoReturn

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pigeond.api.buckets import TokenBuckets
from pigeond.api.web import HttpError
from pigeond.config import Config
from pigeond.model import NewMessage
from pigeond.storage import AcceptOutcome, SwarmRepository
from pigeond.storage.database import Database
from pigeond.storage.errors import StorageUnavailable
from pigeond.storage.queue_bytes import payload_bytes
from pigeond.storage.repository import QueueLimits

# Stores a send with the given limits on the queue; see FloodGuard.admit.
Store = Callable[[QueueLimits], Awaitable[AcceptOutcome]]

# A full target's queue drains one turn at a time (seconds to minutes); 5 s
# lets a sender see room soon after it appears without polling hot.
TARGET_FULL_RETRY_AFTER_S: Final = 5
# A full queue drains as every target's turns end: slower to make room than one target's.
QUEUE_FULL_RETRY_AFTER_S: Final = 30
log = Logger()


class FloodGuard:
    """An :class:`pigeond.api.routes.Admission`; :meth:`configure` applies a reload's limits
    live.  Memory: the buckets of :mod:`pigeond.api.buckets`, bounded there."""

    def __init__(
        self,
        db: Database,
        clock: IReactorTime,
        *,
        max_queued_per_target: int,
        sender_rate_per_s: float,
        sender_burst: int,
        caller_rate_per_s: float = 0.0,
        caller_burst: int = 0,
        max_queued_bytes: int = 0,
    ) -> None:
        """The limits as :meth:`set_limits` takes them (the caller's and the queue's bytes off
        unless given)."""
        self._db = db
        self._clock = clock
        self.senders = TokenBuckets(sender_rate_per_s, sender_burst)
        self.callers = TokenBuckets(caller_rate_per_s, caller_burst)
        self.set_limits(
            max_queued_per_target=max_queued_per_target,
            sender_rate_per_s=sender_rate_per_s,
            sender_burst=sender_burst,
            caller_rate_per_s=caller_rate_per_s,
            caller_burst=caller_burst,
            max_queued_bytes=max_queued_bytes,
        )

    @classmethod
    def from_config(cls, db: Database, clock: IReactorTime, config: Config) -> FloodGuard:
        """A guard with ``config``'s limits."""
        guard = cls(db, clock, max_queued_per_target=0, sender_rate_per_s=0, sender_burst=0)
        guard.configure(config)
        return guard

    def configure(self, config: Config) -> None:
        """A reload's limits (see :meth:`set_limits`)."""
        self.set_limits(
            max_queued_per_target=config.max_queued_per_target,
            sender_rate_per_s=config.sender_rate_per_s,
            sender_burst=config.sender_burst,
            caller_rate_per_s=config.caller_rate_per_s,
            caller_burst=config.caller_burst,
            max_queued_bytes=config.max_queued_bytes,
        )

    def set_limits(
        self,
        *,
        max_queued_per_target: int,
        sender_rate_per_s: float,
        sender_burst: int,
        caller_rate_per_s: float = 0.0,
        caller_burst: int = 0,
        max_queued_bytes: int = 0,
    ) -> None:
        """New limits from now on; buckets carry over, capped at the new bursts."""
        self.max_queued_per_target = max_queued_per_target
        self.max_queued_bytes = max_queued_bytes
        self.queue_limits = QueueLimits(max_queued_per_target, max_queued_bytes)
        self.senders.set_limits(sender_rate_per_s, sender_burst)
        self.callers.set_limits(caller_rate_per_s, caller_burst)

    @property
    def tracked_senders(self) -> int:
        """How many senders have a bucket in memory (the rest have a full one)."""
        return self.senders.tracked

    def limits(self, message: NewMessage) -> QueueLimits:
        """The limits the store applies to ``message`` (to each member's copy of a channel
        message, for the target's cap)."""
        return self.queue_limits

    async def admit(self, message: NewMessage, store: Store, caller: str) -> AcceptOutcome:
        """Store ``message`` through ``store`` if its sender, its ``caller`` (the key of
        :class:`pigeond.api.callers.Caller`), its target and the queue are within their
        limits; otherwise raise a 429 or 507 :class:`HttpError` and store nothing."""
        charged = self._charged(message, caller)
        if not charged:
            return self._outcome(message, await store(self.limits(message)))
        spent = self._spend_if_all_have(charged) or await self._spend_token(message, charged)
        try:
            outcome = await store(self.limits(message))
        except BaseException:
            if spent:
                self._give_back(charged)
            raise
        if spent and outcome is not AcceptOutcome.STORED:
            self._give_back(charged)
        elif spent and message.channel is not None:
            await self._charge_copies(message, charged)
        return self._outcome(message, outcome)

    def _charged(self, message: NewMessage, caller: str) -> list[tuple[TokenBuckets, str]]:
        """The buckets a send of ``message`` by ``caller`` spends from (those limits on)."""
        return [
            (buckets, key)
            for buckets, key in ((self.senders, message.from_session), (self.callers, caller))
            if buckets.limited
        ]

    def _spend_if_all_have(self, charged: list[tuple[TokenBuckets, str]]) -> bool:
        """Spend one token of each bucket if each has one (a send within its limits, the
        usual case: no coroutine to await); False, nothing spent, otherwise."""
        now = self._clock.seconds()
        for buckets, key in charged:
            if buckets.tokens(key, now) < 1:
                return False
        for buckets, key in charged:
            buckets.spend(key, now)
        return True

    async def _spend_token(
        self, message: NewMessage, charged: list[tuple[TokenBuckets, str]]
    ) -> bool:
        """Spend one token of each bucket (True), or let a retry of a stored msg_id
        through without one (False); a 429 when a bucket has no token for a new send."""
        now = self._clock.seconds()
        if any(buckets.tokens(key, now) < 1 for buckets, key in charged):
            if await self._db.read(SwarmRepository.is_stored, message.msg_id):
                return False  # a retry: the store answers it and stores nothing
            now = self._clock.seconds()  # the read took time: the bucket may have refilled
            for buckets, key in charged:
                if buckets.tokens(key, now) < 1:
                    self._refuse_bucket(buckets, key, now)
        for buckets, key in charged:
            buckets.spend(key, now)
        return True

    def _give_back(self, charged: list[tuple[TokenBuckets, str]]) -> None:
        for buckets, key in charged:
            buckets.give_back(key)

    async def _charge_copies(
        self, message: NewMessage, charged: list[tuple[TokenBuckets, str]]
    ) -> None:
        """A stored channel message costs one token per copy: its first is spent, the rest
        now (below zero if need be).  A failed read charges nothing more: the message is
        stored, and its 202 must not turn into an error for the guard's sake."""
        try:
            copies = await self._db.read(SwarmRepository.copies_of, message.msg_id)
        except StorageUnavailable as e:
            log.warn("channel copies of {msg_id} not charged: {error}", msg_id=message.msg_id,
                     error=e)  # fmt: skip
            return
        now = self._clock.seconds()
        for buckets, key in charged:
            if copies > 1:
                buckets.spend(key, now, copies - 1)

    def _outcome(self, message: NewMessage, outcome: AcceptOutcome) -> AcceptOutcome:
        if outcome is AcceptOutcome.TARGET_FULL:
            assert message.to_session is not None
            self._refuse_target(message.to_session)
        if outcome is AcceptOutcome.QUEUE_FULL:
            self._refuse_queue(message)
        return outcome

    # -- the refusals ------------------------------------------------------------------

    def _refuse_bucket(self, buckets: TokenBuckets, key: str, now: float) -> NoReturn:
        what = "sender" if buckets is self.senders else "caller"
        retry_after = buckets.retry_after_s(key, now)
        raise _too_many(
            f"{what} {key!r} is over its limit of {buckets.rate_per_s:g} messages"
            f" a second after a burst of {buckets.burst} (options {what}_rate_per_s,"
            f" {what}_burst; each copy of a channel message counts one); nothing stored,"
            f" retry in {retry_after} s",
            retry_after,
        )

    def _refuse_target(self, target: str) -> NoReturn:
        cap = self.max_queued_per_target
        raise _too_many(
            f"target {target!r} already has {cap} queued messages, the most allowed"
            f" (option max_queued_per_target); nothing stored, retry in"
            f" {TARGET_FULL_RETRY_AFTER_S} s as its queue drains",
            TARGET_FULL_RETRY_AFTER_S,
        )

    def _refuse_queue(self, message: NewMessage) -> NoReturn:
        size = payload_bytes(message.payload)
        copies = " for each member's copy" if message.channel is not None else ""
        raise HttpError(
            507,
            f"the queue of undelivered messages would pass {self.max_queued_bytes} bytes"
            f" of payload with this send's {size} bytes{copies}, the most allowed (option"
            f" max_queued_bytes); nothing stored, retry in {QUEUE_FULL_RETRY_AFTER_S} s"
            " as the queue drains",
            {"retry_after_s": QUEUE_FULL_RETRY_AFTER_S},
            headers={"Retry-After": str(QUEUE_FULL_RETRY_AFTER_S)},
        )


def _too_many(message: str, retry_after_s: int) -> HttpError:
    return HttpError(
        429,
        message,
        {"retry_after_s": retry_after_s},
        headers={"Retry-After": str(retry_after_s)},
    )
