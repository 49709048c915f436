"""The flood guard: the admission around the store that bounds what a runaway agent loop can queue.

Every accepted message becomes a prompt in its target's session, so a loop that
sends without pause would bury that session and fill the disk.  Two limits,
each answered with 429 and ``Retry-After`` and nothing stored, each off at 0:

* ``max_queued_per_target``: queued messages per target, counted in the
  database (the truth survives restarts and sees every sender).  The queue
  drains as the target's turns end, which no sender can predict, so the answer
  is a fixed :data:`TARGET_FULL_RETRY_AFTER_S`.  A channel send is never
  refused for it: the store applies the cap to each member's copy, and a member
  at its cap is left out of that message (the 202's ``skipped``) rather than
  the channel's other members.
* ``sender_rate_per_s`` / ``sender_burst``: a token bucket per ``from`` field,
  in memory.  ``Retry-After`` is the whole seconds until a token is back.

A retried send whose msg_id is already stored passes untouched: the repository
answers it as a duplicate (or a conflict) and stores nothing, and refusing it
would make a client that lost a 202 believe its message was never taken.

How, at the cost of nothing but a dict lookup for a send that passes (no trip to a
database thread): the sender's token is spent on the reactor thread before the store,
so two sends of one sender cannot spend the same token, and given back when the store
did not store (a retry, a conflict, a full target, a failed commit).  The target's
count is taken by the store itself, in the transaction that would insert the row
(:attr:`Accept.queue_cap <pigeond.storage.repository.Accept>`), after its msg_id
check: a retry is answered as before, and concurrent sends can never push a target
past its cap.  Only a sender without a token waits for a read, to learn whether its
send is a retry of a stored msg_id.  While a send's store is under way its token is
spent, so a second send of the same sender at the very edge of its bucket may be
refused though the first then stores nothing: the guard errs on the side of the cap.

The ``from`` field is self-declared: the sender limit stops a loop, not an
adversary who varies its name; the per-target cap is what bounds storage.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import NoReturn

from twisted.internet.interfaces import IReactorTime

from pigeond.api.web import HttpError
from pigeond.config import Config
from pigeond.model import NewMessage
from pigeond.storage import AcceptOutcome, SwarmRepository
from pigeond.storage.database import Database

# Stores a send with the given cap on its target's queue (0: none); see FloodGuard.admit.
Store = Callable[[int], Awaitable[AcceptOutcome]]

# A full target's queue drains one turn at a time (seconds to minutes); 5 s
# lets a sender see room soon after it appears without polling hot.
TARGET_FULL_RETRY_AFTER_S = 5
# The most senders with a bucket in memory: about 330 bytes each with a
# 100-character name, so about 3 MB.  Reached only by more distinct names in
# burst/rate seconds than this; then the bucket spent from longest ago is
# forgotten, which gives that sender a full bucket again.
MAX_TRACKED_SENDERS = 10_000
# Clock readings near 1.8e9 s carry float error around 1e-7 s: a wait within a
# millisecond of whole seconds is rounded down to them, so 2 s is not answered 3.
_ROUNDING_SLACK_S = 1e-3


class FloodGuard:
    """An :class:`pigeond.api.routes.Admission`; :meth:`configure` applies a reload's limits live.

    Memory: only senders that spent a token in the last ``burst / rate`` seconds
    (10 s with the defaults) keep a bucket, since an older one has refilled and
    is the same as none; at most :data:`MAX_TRACKED_SENDERS` in any case.
    """

    def __init__(
        self,
        db: Database,
        clock: IReactorTime,
        *,
        max_queued_per_target: int,
        sender_rate_per_s: float,
        sender_burst: int,
    ) -> None:
        self._db = db
        self._clock = clock
        # sender -> (tokens after its last spend, time of that spend), oldest spend first
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self.set_limits(
            max_queued_per_target=max_queued_per_target,
            sender_rate_per_s=sender_rate_per_s,
            sender_burst=sender_burst,
        )

    def configure(self, config: Config) -> None:
        """A reload's limits (see :meth:`set_limits`)."""
        self.set_limits(
            max_queued_per_target=config.max_queued_per_target,
            sender_rate_per_s=config.sender_rate_per_s,
            sender_burst=config.sender_burst,
        )

    def set_limits(
        self, *, max_queued_per_target: int, sender_rate_per_s: float, sender_burst: int
    ) -> None:
        """New limits from now on; buckets carry over, capped at the new burst."""
        self.max_queued_per_target = max_queued_per_target
        self.sender_rate_per_s = sender_rate_per_s
        self.sender_burst = sender_burst
        if not self._sender_limited:
            self._buckets.clear()

    @property
    def tracked_senders(self) -> int:
        """How many senders have a bucket in memory (the rest have a full one)."""
        return len(self._buckets)

    @property
    def _sender_limited(self) -> bool:
        return self.sender_rate_per_s > 0 and self.sender_burst > 0

    def queue_cap(self, message: NewMessage) -> int:
        """The cap the store applies to ``message``'s target, or to each member's copy of a
        channel message (0: none)."""
        return self.max_queued_per_target

    async def admit(self, message: NewMessage, store: Store) -> AcceptOutcome:
        """Store ``message`` through ``store`` if its sender and target are within their
        limits; otherwise raise a 429 :class:`HttpError` and store nothing."""
        if not self._sender_limited:
            return self._outcome(message, await store(self.queue_cap(message)))
        spent = await self._spend_token(message)
        try:
            outcome = await store(self.queue_cap(message))
        except BaseException:
            if spent:
                self._give_back(message.from_session)
            raise
        if spent and outcome is not AcceptOutcome.STORED:
            self._give_back(message.from_session)
        return self._outcome(message, outcome)

    async def _spend_token(self, message: NewMessage) -> bool:
        """Spend one of the sender's tokens (True), or let a retry of a stored msg_id
        through without one (False); a 429 when the sender has no token for a new send."""
        sender = message.from_session
        now = self._clock.seconds()
        self._forget_refilled(now)
        tokens = self._tokens(sender, now)
        if tokens < 1:
            if await self._db.read(SwarmRepository.is_stored, message.msg_id):
                return False  # a retry: the store answers it and stores nothing
            now = self._clock.seconds()  # the read took time: the bucket may have refilled
            tokens = self._tokens(sender, now)
            if tokens < 1:
                self._refuse_sender(sender, tokens)
        self._buckets[sender] = (tokens - 1, now)
        self._buckets.move_to_end(sender)
        while len(self._buckets) > MAX_TRACKED_SENDERS:
            self._buckets.popitem(last=False)
        return True

    def _give_back(self, sender: str) -> None:
        """Return a token spent on a send that stored nothing (a bucket forgotten since
        was full, which is the same as getting it back)."""
        bucket = self._buckets.get(sender)
        if bucket is not None:
            left, spent_at = bucket
            self._buckets[sender] = (min(float(self.sender_burst), left + 1), spent_at)

    def _outcome(self, message: NewMessage, outcome: AcceptOutcome) -> AcceptOutcome:
        if outcome is AcceptOutcome.TARGET_FULL:
            assert message.to_session is not None
            self._refuse_target(message.to_session)
        return outcome

    # -- the sender's bucket ------------------------------------------------------

    def _tokens(self, sender: str, now: float) -> float:
        bucket = self._buckets.get(sender)
        if bucket is None:
            return float(self.sender_burst)
        left, spent_at = bucket
        refilled = left + max(0.0, now - spent_at) * self.sender_rate_per_s
        return min(float(self.sender_burst), refilled)

    def _forget_refilled(self, now: float) -> None:
        """Drop buckets whose last spend is old enough that they are full again.

        Buckets are in spend order, so this stops at the first recent one:
        amortised constant time per send.
        """
        horizon = now - self.sender_burst / self.sender_rate_per_s
        while self._buckets:
            _left, spent_at = next(iter(self._buckets.values()))
            if spent_at > horizon:
                break
            self._buckets.popitem(last=False)

    def _refuse_sender(self, sender: str, tokens: float) -> NoReturn:
        wait_s = (1 - tokens) / self.sender_rate_per_s
        retry_after = max(1, math.ceil(wait_s - _ROUNDING_SLACK_S))
        raise _too_many(
            f"sender {sender!r} is over its limit of {self.sender_rate_per_s:g} messages"
            f" a second after a burst of {self.sender_burst} (options sender_rate_per_s,"
            f" sender_burst); nothing stored, retry in {retry_after} s",
            retry_after,
        )

    # -- the target's queue ---------------------------------------------------------

    def _refuse_target(self, target: str) -> NoReturn:
        cap = self.max_queued_per_target
        raise _too_many(
            f"target {target!r} already has {cap} queued messages, the most allowed"
            f" (option max_queued_per_target); nothing stored, retry in"
            f" {TARGET_FULL_RETRY_AFTER_S} s as its queue drains",
            TARGET_FULL_RETRY_AFTER_S,
        )


def _too_many(message: str, retry_after_s: int) -> HttpError:
    return HttpError(
        429,
        message,
        {"retry_after_s": retry_after_s},
        headers={"Retry-After": str(retry_after_s)},
    )
