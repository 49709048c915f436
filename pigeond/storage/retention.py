"""Pruning done history, and giving its pages back to the file system.

Without it every message stays forever: 100,000 messages of 1 KiB left a
162 MB file.  What may go is :data:`~pigeond.storage.addressing_schema.PRUNABLE_SQL`:
direct messages that are verified in their target's transcript, failed,
expired or cancelled, and channel messages (stored, never delivered, so age is
all that can end them).  A queued direct message, and a hand-off not yet
verified (the verifier may still send it back to the queue), are never pruned.

A row's age is its ``updated_at``.  For a done row that is the moment it
became done (verified, failed, expired, cancelled): nothing changes a done row
afterwards, except an operator's requeue, which makes it queued again and so
not prunable.  For a channel message it is when it was accepted (or cancelled).
The oldest go first.

Inbox cursors (``cur_N``) are hand-off numbers kept in ``swarm_sequences``,
which deletions never move, so a cursor stays valid and ``has_more`` honest
after pruning; a pruned message simply is no longer there.  Its msg_id is
forgotten too: :meth:`get` answers None, as for an id never seen.

Deletions run in small batches, one short ``BEGIN IMMEDIATE`` each, so the
daemon's own writes wait at most one batch.  The pages they free go back to
the file system with ``PRAGMA incremental_vacuum`` (the database is kept in
``auto_vacuum = INCREMENTAL``, see storage/schema.py), also a bounded number at
a time.  The turn costs recorded before the cutoff (storage/costs.py) go in the same
batches, uncounted.  Times come in as unix milliseconds: nothing here reads a clock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pigeond.storage.base import RepositoryBase, reads
from pigeond.storage.costs import PRUNE_TURNS_SQL
from pigeond.storage.engines import ROW_NAME, FileSize
from pigeond.storage.migrations import PRUNABLE_SQL

__all__ = ["DAY_MS", "FileSize", "PrunableGroup", "PruneCounts", "Retention", "cutoff_ms"]

DAY_MS = 24 * 3600 * 1000


def _prune_batch(row: str) -> str:
    """The oldest prunable rows deleted, each named by ``row`` (the name a row has within
    one statement): the inner SELECT is a SEARCH of the partial idx_swarm_prunable."""
    return (
        f"DELETE FROM swarm_messages WHERE {row} IN (SELECT {row} FROM swarm_messages"
        f" WHERE {PRUNABLE_SQL} AND updated_at < :cutoff ORDER BY updated_at LIMIT :limit)"
        " RETURNING CASE WHEN channel IS NULL THEN 'direct' ELSE 'channel' END, state"
    )


PRUNE_BATCH_SQL = ROW_NAME.map(_prune_batch)
PRUNABLE_SUMMARY_SQL = (
    "SELECT CASE WHEN channel IS NULL THEN 'direct' ELSE 'channel' END AS scope, state,"
    " COUNT(*), MIN(updated_at), MAX(updated_at) FROM swarm_messages"
    f" WHERE {PRUNABLE_SQL} AND updated_at < :cutoff"
    " GROUP BY scope, state ORDER BY scope DESC, state"
)

# (scope, state) → rows: scope is "direct" or "channel".
PruneCounts = Counter[tuple[str, str]]


def cutoff_ms(now_ms: int, older_than_days: float) -> int:
    """Rows last changed before this instant are old enough to prune."""
    return now_ms - int(older_than_days * DAY_MS)


@dataclass(frozen=True, slots=True)
class PrunableGroup:
    """Rows of one scope ("direct" or "channel") and state that a prune would remove."""

    scope: str
    state: str
    count: int
    oldest_at: int
    newest_at: int


class Retention(RepositoryBase):
    # -- what would go ---------------------------------------------------------

    @reads
    def prunable(self, cutoff: int) -> list[PrunableGroup]:
        """Prunable rows last changed before ``cutoff``, by scope and state."""
        rows = self._conn.execute(PRUNABLE_SUMMARY_SQL, {"cutoff": cutoff}).fetchall()
        return [PrunableGroup(str(s), str(st), int(n), int(a), int(b)) for s, st, n, a, b in rows]

    @reads
    def explain_prune(self, cutoff: int, limit: int) -> list[str]:
        """SQLite's query plan of one prune batch, one detail string per step."""
        rows = self._conn.execute(
            "EXPLAIN QUERY PLAN " + PRUNE_BATCH_SQL.sqlite, {"cutoff": cutoff, "limit": limit}
        )
        return [str(r[3]) for r in rows.fetchall()]

    # -- pruning -----------------------------------------------------------------

    def prune_batch(self, cutoff: int, limit: int) -> PruneCounts:
        """Delete at most ``limit`` of the oldest prunable rows last changed before
        ``cutoff``, in one transaction; returns how many of each scope and state went."""
        with self._write() as conn:
            rows = conn.execute(
                self.engine.sql(PRUNE_BATCH_SQL), {"cutoff": cutoff, "limit": limit}
            ).fetchall()
            for prune_turns in PRUNE_TURNS_SQL:  # the turn costs of the same age (uncounted)
                conn.execute(prune_turns, {"cutoff": cutoff, "limit": limit})
            if rows:
                self.engine.after_prune(conn)
        return Counter((str(scope), str(state)) for scope, state in rows)

    @reads
    def file_size(self) -> FileSize:
        """The database's size (on PostgreSQL, in its pages, none of them free here)."""
        return self.engine.file_size(self._conn)

    def give_back_pages(self, max_pages: int) -> int:
        """Return at most ``max_pages`` free pages to the file system; returns how many went
        (none where the engine reclaims space itself: PostgreSQL's autovacuum)."""
        return self.engine.give_back_pages(self._conn, max_pages)
