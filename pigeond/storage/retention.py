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

from pigeond.storage.base import Connection, RepositoryBase, reads
from pigeond.storage.costs import PRUNE_TURNS_SQL
from pigeond.storage.errors import UNAVAILABLE_ERRORS, StorageUnavailable
from pigeond.storage.migrations import PRUNABLE_SQL
from pigeond.storage.schema import AUTO_VACUUM_INCREMENTAL

DAY_MS = 24 * 3600 * 1000

# Pages of the search index merged after each prune batch (see _fold_search_deletes).
SEARCH_MERGE_PAGES = 200

# The oldest prunable rows, by rowid: a SEARCH of the partial idx_swarm_prunable.
_OLDEST_PRUNABLE_SQL = (
    f"SELECT rowid FROM swarm_messages WHERE {PRUNABLE_SQL} AND updated_at < :cutoff"
    " ORDER BY updated_at LIMIT :limit"
)
PRUNE_BATCH_SQL = (
    f"DELETE FROM swarm_messages WHERE rowid IN ({_OLDEST_PRUNABLE_SQL})"
    " RETURNING CASE WHEN channel IS NULL THEN 'direct' ELSE 'channel' END, state"
)
# The same on PostgreSQL, whose tables have no rowid: a row's ctid names it within the
# statement, as a rowid does.
PRUNE_BATCH_PG_SQL = PRUNE_BATCH_SQL.replace("rowid", "ctid")
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


@dataclass(frozen=True, slots=True)
class FileSize:
    """The database's size in pages; ``free_pages`` are on the freelist, not yet given back."""

    page_count: int
    page_size: int
    free_pages: int
    incremental: bool

    @property
    def total_bytes(self) -> int:
        return self.page_count * self.page_size


class Retention(RepositoryBase):
    # -- what would go ---------------------------------------------------------

    @reads
    def prunable(self, cutoff: int) -> list[PrunableGroup]:
        """Prunable rows last changed before ``cutoff``, by scope and state."""
        rows = self._conn.execute(PRUNABLE_SUMMARY_SQL, {"cutoff": cutoff}).fetchall()
        return [PrunableGroup(str(s), str(st), int(n), int(a), int(b)) for s, st, n, a, b in rows]

    @reads
    def explain_prune(self, cutoff: int, limit: int) -> list[str]:
        """The query plan of one prune batch, one detail string per step."""
        rows = self._conn.execute(
            "EXPLAIN QUERY PLAN " + PRUNE_BATCH_SQL, {"cutoff": cutoff, "limit": limit}
        )
        return [str(r[3]) for r in rows.fetchall()]

    # -- pruning -----------------------------------------------------------------

    def prune_batch(self, cutoff: int, limit: int) -> PruneCounts:
        """Delete at most ``limit`` of the oldest prunable rows last changed before
        ``cutoff``, in one transaction; returns how many of each scope and state went."""
        with self._write() as conn:
            sql = PRUNE_BATCH_PG_SQL if self.postgres else PRUNE_BATCH_SQL
            rows = conn.execute(sql, {"cutoff": cutoff, "limit": limit}).fetchall()
            for prune_turns in PRUNE_TURNS_SQL:  # the turn costs of the same age (uncounted)
                conn.execute(prune_turns, {"cutoff": cutoff, "limit": limit})
            if rows and not self.postgres:
                self._fold_search_deletes(conn)
        return Counter((str(scope), str(state)) for scope, state in rows)

    def _fold_search_deletes(self, conn: Connection) -> None:
        """Merge a bounded part of the search index (migration 13): FTS5 records a delete
        as a tombstone beside the entry it cancels, and only a merge drops both, so without
        this the index would keep the pruned rows' size.  A negative budget merges even
        small levels, as an incremental 'optimize' (SEARCH_MERGE_PAGES pages at most)."""
        if conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'swarm_search'"
        ).fetchone():
            conn.execute(
                "INSERT INTO swarm_search (swarm_search, rank) VALUES ('merge', ?)",
                (-SEARCH_MERGE_PAGES,),
            )

    @reads
    def file_size(self) -> FileSize:
        """The database's size.  On PostgreSQL its 8 KiB pages as pg_database_size counts
        them, none free here: PostgreSQL's own (auto)vacuum gives space back."""
        if self.postgres:
            size = self._conn.execute("SELECT pg_database_size(current_database())").fetchone()
            return FileSize(int(size[0]) // 8192, 8192, 0, False)

        def pragma(name: str) -> int:
            return int(self._conn.execute(f"PRAGMA {name}").fetchone()[0])

        return FileSize(
            page_count=pragma("page_count"),
            page_size=pragma("page_size"),
            free_pages=pragma("freelist_count"),
            incremental=pragma("auto_vacuum") == AUTO_VACUUM_INCREMENTAL,
        )

    def give_back_pages(self, max_pages: int) -> int:
        """Return at most ``max_pages`` free pages to the file system; returns how many went.

        ``PRAGMA incremental_vacuum`` yields one row per page it frees and stops
        when the caller stops stepping; ``executescript`` steps it to the end,
        as its own short write transaction.  Nothing happens (0) unless the
        database is in incremental auto-vacuum mode.  The WAL is then
        checkpointed without waiting on readers, so the file itself shrinks now
        rather than at the next automatic checkpoint.
        """
        if self.postgres:
            return 0  # PostgreSQL's autovacuum does this
        before = self.file_size()
        if not before.incremental or before.free_pages == 0 or max_pages <= 0:
            return 0
        try:
            self.sqlite_connection.executescript(f"PRAGMA incremental_vacuum({int(max_pages)})")
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except UNAVAILABLE_ERRORS as e:
            raise StorageUnavailable(f"database write failed: {e}") from e
        return max(before.page_count - self.file_size().page_count, 0)
