"""The two pair brakes: too many messages from one session to another, and the same (or
nearly the same) payload bouncing between two sessions.

Both judge a direct send from one session to another; a channel send, a person's send
from a shell (its sender is no session id) and pigeond's own notices are never braked.
Both count only messages accepted for delivery, in a window that starts again when a
person releases a held message of the pair with a reset (the pair's reset time, scope
``pair:<one>:<other>`` with the two ids in sorted order: both directions and both brakes
share it); :mod:`pigeond.storage.pair_history` reads both, in one trip.  A message that
trips one is held for a person with a reason that says why.

- :class:`PairRateBrake`: ``max_pair_messages_per_minute`` messages from the sender to
  the target in the sliding minute before the send (a message exactly a minute old has
  left it) let the next one through no more.
- :class:`RepeatBrake`: ``max_repeats_per_pair`` payloads of the last ``repeat_window_s``
  (either direction) that are repeats of the new one
  (:mod:`pigeond.brakes.similarity`) hold it.

The cost of a judgement is bounded, since one runs for every send.  The rate brake reads
one count that walks at most ``max_pair_messages_per_minute`` entries of an index (plus
the pair's brake-held messages of the minute, which only the sender's own rate bounds).
The repeat brake reads at most :data:`COMPARED_PER_LIMIT` times ``max_repeats_per_pair``
payloads, each cut to :data:`~pigeond.brakes.similarity.READ_CHARS` in the query, and
compares them on a database reader thread, not the reactor's: none when the pair has
fewer than the limit in its window, each on at most 2,048 characters a side, and for at
most :data:`~pigeond.brakes.similarity.COMPARE_BUDGET_S` in all.
"""

from __future__ import annotations

from typing import Final

from twisted.logger import Logger

from pigeond.brakes.similarity import COMPARE_BUDGET_S, READ_CHARS, RepeatCount, count_repeats
from pigeond.config import Config
from pigeond.config.options import DEFAULTS
from pigeond.model import NOTICE_KIND, SESSION_ID_RE, Hold, NewMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database

log = Logger()
RATE_WINDOW_MS: Final = 60_000
# How many of the pair's newest payloads the repeat brake compares, per repeat its
# limit allows: a loop's repeats are half of its exchange (each side repeats its own
# message), so three times the limit finds them with room for other traffic in between.
COMPARED_PER_LIMIT: Final = 3


def between_sessions(message: NewMessage) -> bool:
    """Whether ``message`` is a direct message from one session to another: what the pair
    brakes judge (not a channel send, a person's send from a shell or pigeond's notice)."""
    return (
        message.to_session is not None
        and message.channel is None
        and message.kind != NOTICE_KIND
        and SESSION_ID_RE.fullmatch(message.from_session) is not None
    )


def window_words(seconds: int) -> str:
    """A window as a person reads it: ``10 min``, ``2 h``, ``90 s``."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


class _PairBrake:
    """What both pair brakes share: the database they read, their options."""

    def __init__(self, db: Database, config: Config = DEFAULTS) -> None:
        self._db = db
        self.configure(config)

    def configure(self, config: Config) -> None:
        raise NotImplementedError


class PairRateBrake(_PairBrake):
    """Holds the message past ``max_pair_messages_per_minute`` from one session to another."""

    name: Final = "pair_rate"

    def configure(self, config: Config) -> None:
        self.limit = config.max_pair_messages_per_minute

    async def judge(self, message: NewMessage, thread_id: str, now_ms: int) -> Hold | None:
        limit = self.limit
        if limit <= 0 or not between_sessions(message):
            return None
        sender, target = message.from_session, message.to_session
        assert target is not None
        start = now_ms - RATE_WINDOW_MS
        sent = await self._db.read(SwarmRepository.pair_sent_count, sender, target, start, limit)
        if sent < limit:
            return None
        return Hold(
            self.name,
            f"{sender} sent {limit + 1} messages to {target} in the last minute"
            f" (limit {limit}); a person must release it",
        )


class RepeatBrake(_PairBrake):
    """Holds the payload that would be the ``max_repeats_per_pair`` + 1st near-identical
    one between two sessions within ``repeat_window_s``."""

    name: Final = "repeat"

    def configure(self, config: Config) -> None:
        self.limit = config.max_repeats_per_pair
        self.window_s = config.repeat_window_s

    async def judge(self, message: NewMessage, thread_id: str, now_ms: int) -> Hold | None:
        limit, window_s = self.limit, self.window_s
        if limit <= 0 or window_s <= 0 or not between_sessions(message):
            return None
        sender, target = message.from_session, message.to_session
        assert target is not None
        start = now_ms - window_s * 1000
        count = await self._db.read(repeats_between, sender, target, start, message.payload, limit)
        if count.out_of_time:
            log.warn(
                "repeat brake: comparing {sender}'s payload with {target}'s exchange took"
                " over {budget_s} s; judged on the {found} repeats found by then",
                sender=sender, target=target, budget_s=COMPARE_BUDGET_S, found=count.found,
            )  # fmt: skip
        if count.found < limit:
            return None
        return Hold(
            self.name,
            f"{sender} and {target} exchanged {limit + 1} near-identical messages in"
            f" {window_words(window_s)} (limit {limit}); a person must release it",
        )


def repeats_between(
    repo: SwarmRepository, one: str, other: str, window_start_ms: int, payload: str, needed: int
) -> RepeatCount:
    """On a database reader: how many of the payloads the two sessions sent each other in
    the window repeat ``payload``, counted no further than ``needed`` (see
    :func:`~pigeond.brakes.similarity.count_repeats`)."""
    compared = COMPARED_PER_LIMIT * needed
    earlier = repo.pair_payloads(one, other, window_start_ms, compared, READ_CHARS)
    return count_repeats(payload, earlier, needed)
