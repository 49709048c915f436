"""The end of the receipt chain, as SQL: seen messages waiting for an answer, and answers.

A direct message goes accepted → handed off → seen (``verified_at``, see
storage/delivery.py) → answered (``answered_at``, ``answer_message_id``).  The
verifier looks for an answer only within a bounded time after a message was seen
(``since_ms``): each query here takes that bound, so a message nobody answers stops
costing transcript reads, and the range on ``idx_swarm_unanswered`` reads only the
recent end of the index, however much unanswered history it holds.
"""

from __future__ import annotations

from collections.abc import Mapping

from pigeond.model import StoredMessage
from pigeond.storage.base import COLUMNS, Connection, RepositoryBase, reads, row_to_message
from pigeond.storage.engines import indexed_by
from pigeond.storage.write_marks import shares_commit

# Seen, unanswered direct messages seen at or after a time: the partial index's own terms,
# word for word (SQLite uses a partial index only then), and a range on its first column.
UNANSWERED_SINCE = indexed_by("swarm_messages", "idx_swarm_unanswered").map(
    lambda table: (
        f" FROM {table}"
        " WHERE state = 'handed_off' AND verified_at IS NOT NULL AND answered_at IS NULL"
        " AND verified_at >= :since"
    )
)


class Receipts(RepositoryBase):
    @reads
    def unanswered_targets(self, since_ms: int) -> list[str]:
        """Targets with seen messages not answered yet, seen at or after ``since_ms``."""
        rows = self._conn.execute(
            "SELECT DISTINCT to_session" + self.engine.sql(UNANSWERED_SINCE), {"since": since_ms}
        )
        return [r[0] for r in rows.fetchall()]

    @reads
    def awaiting_answer(self, target: str, since_ms: int) -> list[StoredMessage]:
        """``target``'s seen messages not answered yet, seen at or after ``since_ms``."""
        rows = self._conn.execute(
            f"SELECT {COLUMNS}" + self.engine.sql(UNANSWERED_SINCE) + " AND to_session = :target"
            " ORDER BY verified_at",
            {"since": since_ms, "target": target},
        ).fetchall()
        return [row_to_message(r) for r in rows]

    @shares_commit
    def mark_answered(self, answers: Mapping[str, str], now_ms: int) -> list[str]:
        """Seen → answered: each msg_id with opencode's id of the assistant message that
        answered it.  A message not seen, already answered or no longer handed off is
        left alone; returns the msg_ids changed."""
        with self._write() as conn:
            return self._answer(conn, answers, now_ms)

    @staticmethod
    def _answer(conn: Connection, answers: Mapping[str, str], now_ms: int) -> list[str]:
        done = []
        for msg_id, answer_id in answers.items():
            cursor = conn.execute(
                "UPDATE swarm_messages SET answered_at = ?, answer_message_id = ?,"
                " updated_at = ? WHERE msg_id = ? AND state = 'handed_off'"
                " AND verified_at IS NOT NULL AND answered_at IS NULL",
                (now_ms, answer_id, now_ms, msg_id),
            )
            if cursor.rowcount:
                done.append(msg_id)
        return done
