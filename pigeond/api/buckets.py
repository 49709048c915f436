"""Token buckets by key, in memory: the flood guard's rate limits (pigeond/api/flood.py).

One :class:`TokenBuckets` is one limit (the ``from`` field's, or the caller's): each key
has ``burst`` tokens, spent one a message (one a copy, for a channel message) and coming
back at ``rate`` a second.  A channel message's copies are counted once it is stored, so
its last copies may take a bucket below zero: the debt is paid back at the same rate
before the key sends again, so over time no key stores more copies than its rate.

Memory: only keys whose bucket is not full again keep one (a full bucket is the same as
none), at most :data:`MAX_TRACKED_KEYS` in any case.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Final

# The most keys with a bucket in memory: about 330 bytes each with a 100-character key,
# so about 3 MB.  Reached only by more distinct keys in burst/rate seconds than this; then
# the bucket spent from longest ago is forgotten, which gives that key a full bucket again.
MAX_TRACKED_KEYS: Final = 10_000
# Clock readings near 1.8e9 s carry float error around 1e-7 s: a wait within a
# millisecond of whole seconds is rounded down to them, so 2 s is not answered 3.
_ROUNDING_SLACK_S: Final = 1e-3


class TokenBuckets:
    """One rate limit's buckets, by key; ``rate`` or ``burst`` 0 turns it off."""

    def __init__(self, rate_per_s: float, burst: int) -> None:
        # key -> (tokens after its last spend, time of that spend), oldest spend first
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self.rate_per_s = 0.0
        self.burst = 0
        self.set_limits(rate_per_s, burst)

    def set_limits(self, rate_per_s: float, burst: int) -> None:
        """New limits from now on; buckets carry over, capped at the new burst."""
        self.rate_per_s = rate_per_s
        self.burst = burst
        if not self.limited:
            self._buckets.clear()

    @property
    def limited(self) -> bool:
        return self.rate_per_s > 0 and self.burst > 0

    @property
    def tracked(self) -> int:
        """How many keys have a bucket in memory (the rest have a full one)."""
        return len(self._buckets)

    def tokens(self, key: str, now: float) -> float:
        """``key``'s tokens at ``now`` (below zero while it pays back a channel's copies)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return float(self.burst)
        left, spent_at = bucket
        refilled = left + max(0.0, now - spent_at) * self.rate_per_s
        return min(float(self.burst), refilled)

    def spend(self, key: str, now: float, cost: int = 1) -> None:
        """Take ``cost`` tokens from ``key``'s bucket, below zero if it has fewer."""
        self._forget_refilled(now)
        self._buckets[key] = (self.tokens(key, now) - cost, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > MAX_TRACKED_KEYS:
            self._buckets.popitem(last=False)

    def give_back(self, key: str) -> None:
        """Return a token spent on a send that stored nothing (a bucket forgotten since
        was full, which is the same as getting it back)."""
        bucket = self._buckets.get(key)
        if bucket is not None:
            left, spent_at = bucket
            self._buckets[key] = (min(float(self.burst), left + 1), spent_at)

    def retry_after_s(self, key: str, now: float) -> int:
        """Whole seconds until ``key`` has a token again, at least 1."""
        wait_s = (1 - self.tokens(key, now)) / self.rate_per_s
        return max(1, math.ceil(wait_s - _ROUNDING_SLACK_S))

    def _forget_refilled(self, now: float) -> None:
        """Drop the buckets, oldest spend first, that are full again; stops at the first
        that is not: amortised constant time per spend."""
        while self._buckets:
            key = next(iter(self._buckets))
            if self.tokens(key, now) < self.burst:
                break
            self._buckets.popitem(last=False)
