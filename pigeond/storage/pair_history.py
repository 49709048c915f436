"""What the pair brakes read: the recent messages between two sessions.

Both reads walk ``idx_swarm_pair`` (``to_session, from_session, created_at``: the
migration at the end of :data:`pigeond.storage.migrations.MIGRATIONS`), one range per
direction, newest first, and stop at their limit: a send's judgement costs at most
``limit`` index entries and rows per direction, whatever the pair's history.  Only
messages accepted for delivery count; a channel member's copy is a message from its
sender to that member like any other.  ``since_ms`` is exclusive: the judges pass the
later of the window's start and the pair's reset.
"""

from __future__ import annotations

from pigeond.storage.base import RepositoryBase, reads

# One direction of a pair after a time, newest first (a SEARCH of idx_swarm_pair).
_SENT_AFTER = "to_session = ? AND from_session = ? AND created_at > ?"

PAIR_SENT_COUNT_SQL = (
    f"SELECT COUNT(*) FROM (SELECT 1 FROM swarm_messages WHERE {_SENT_AFTER} LIMIT ?) AS sent"
)
# The newest payloads one way, cut in the query (a long one costs no more than its
# compared part); both ways are two of these, merged.
_NEWEST_ONE_WAY = (
    "SELECT created_at, substr(payload, 1, ?) AS payload FROM swarm_messages"
    f" WHERE {_SENT_AFTER} ORDER BY created_at DESC LIMIT ?"
)
PAIR_PAYLOADS_SQL = (
    f"SELECT payload FROM (SELECT * FROM ({_NEWEST_ONE_WAY}) AS one_way"
    f" UNION ALL SELECT * FROM ({_NEWEST_ONE_WAY}) AS other_way) AS pair"
    " ORDER BY created_at DESC LIMIT ?"
)


class PairHistory(RepositoryBase):
    @reads
    def pair_sent_count(self, sender: str, target: str, since_ms: int, limit: int) -> int:
        """Messages ``sender`` sent to ``target`` after ``since_ms``, counted no further
        than ``limit``."""
        row = self._conn.execute(PAIR_SENT_COUNT_SQL, (target, sender, since_ms, limit))
        return int(row.fetchone()[0])

    @reads
    def pair_payloads(
        self, one: str, other: str, since_ms: int, limit: int, chars: int
    ) -> list[str]:
        """The first ``chars`` characters of the payloads the two sessions sent each
        other (either way) after ``since_ms``, newest first, at most ``limit``."""
        rows = self._conn.execute(
            PAIR_PAYLOADS_SQL,
            (chars, other, one, since_ms, limit, chars, one, other, since_ms, limit, limit),
        )
        return [str(r[0]) for r in rows.fetchall()]
