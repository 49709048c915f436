"""What the pair brakes read: the recent messages between two sessions.

Both reads walk ``idx_swarm_pair`` (``to_session, from_session, created_at``: the
migration at the end of :data:`pigeond.storage.migrations.MIGRATIONS`), one range per
direction, newest first, and stop at their limit.  A window starts at the later of the
judge's window start and the pair's reset (a person's release with ``reset``:
``swarm_brake_resets``, scope :func:`~pigeond.storage.brake_holds.pair_scope`), both
exclusive, read in the same call.

Only messages accepted for delivery count (:data:`ACCEPTED_FOR_DELIVERY`): not one a brake
holds now, nor one a person dropped while a brake held it; a consent hold, a released
message and a channel member's copy (a message from its sender to that member) count.
The ones left out are read and stepped over, so a judgement walks at most its limit's
worth of counted rows plus the pair's brake-held and dropped ones of the window (which
only the sender's own rate bounds: after a hold, a loop's next messages are held too).
"""

from __future__ import annotations

from typing import Final

from pigeond.storage.base import reads
from pigeond.storage.brake_holds import BrakeHolds, pair_scope

# A message that went (or goes) to its target: not held by a brake now (hold_kind 'brake'),
# not dropped by a person while held (cancelled, with its brake kept and no hand-off).
ACCEPTED_FOR_DELIVERY: Final = (
    "(hold_kind IS NULL OR hold_kind <> 'brake')"
    " AND NOT (state = 'cancelled' AND hold_brake IS NOT NULL AND handed_off_at IS NULL)"
)
# One direction of a pair after a time, newest first (a SEARCH of idx_swarm_pair).
_SENT_AFTER = f"to_session = ? AND from_session = ? AND created_at > ? AND {ACCEPTED_FOR_DELIVERY}"

PAIR_SENT_COUNT_SQL: Final = (
    f"SELECT COUNT(*) FROM (SELECT 1 FROM swarm_messages WHERE {_SENT_AFTER} LIMIT ?) AS sent"
)
# The newest payloads one way, cut in the query (a long one costs no more than its
# compared part); both ways are two of these, merged.
_NEWEST_ONE_WAY = (
    "SELECT created_at, substr(payload, 1, ?) AS payload FROM swarm_messages"
    f" WHERE {_SENT_AFTER} ORDER BY created_at DESC LIMIT ?"
)
PAIR_PAYLOADS_SQL: Final = (
    f"SELECT payload FROM (SELECT * FROM ({_NEWEST_ONE_WAY}) AS one_way"
    f" UNION ALL SELECT * FROM ({_NEWEST_ONE_WAY}) AS other_way) AS pair"
    " ORDER BY created_at DESC LIMIT ?"
)


class PairHistory(BrakeHolds):
    @reads
    def pair_sent_count(self, sender: str, target: str, window_start_ms: int, limit: int) -> int:
        """Messages ``sender`` sent ``target`` after the window's start (or the pair's
        reset if later), counted no further than ``limit``."""
        after = self._pair_counted_after(sender, target, window_start_ms)
        row = self._conn.execute(PAIR_SENT_COUNT_SQL, (target, sender, after, limit))
        return int(row.fetchone()[0])

    @reads
    def pair_payloads(
        self, one: str, other: str, window_start_ms: int, limit: int, chars: int
    ) -> list[str]:
        """The first ``chars`` characters of the payloads the two sessions sent each
        other (either way) after the window's start (or the pair's reset if later),
        newest first, at most ``limit``."""
        after = self._pair_counted_after(one, other, window_start_ms)
        rows = self._conn.execute(
            PAIR_PAYLOADS_SQL,
            (chars, other, one, after, limit, chars, one, other, after, limit, limit),
        )
        return [str(r[0]) for r in rows.fetchall()]

    def _pair_counted_after(self, one: str, other: str, window_start_ms: int) -> int:
        reset = self.brake_reset_at(pair_scope(one, other))
        return window_start_ms if reset is None else max(window_start_ms, reset)
