"""SQLite: one file, one writer at a time, and one daemon on it.

A write transaction begins ``IMMEDIATE`` (it takes the write lock at once, so it never
fails half-way on a lock another writer took first).  The full-text index is an FTS5
table whose insert trigger only notes the new rows: they are indexed in one statement at
the commit (an FTS5 insert per row costs some 40 times more), and a prune merges part of
the index so that its tombstones go too.  Space freed by pruning goes back to the file
system with ``PRAGMA incremental_vacuum``.  One daemon serves a file (its instance lock),
so there is no one to wake and no lock beyond SQLite's own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from pigeond.storage.addressing_schema import CLEAR_PENDING_SQL, INDEX_PENDING_SQL
from pigeond.storage.columns import COLUMNS
from pigeond.storage.engines.base import Connection, EngineSql, FileSize
from pigeond.storage.errors import UNAVAILABLE_ERRORS, StorageUnavailable
from pigeond.storage.existing import open_existing_sqlite
from pigeond.storage.schema import AUTO_VACUUM_INCREMENTAL, EventLog, connect, open_database
from pigeond.storage.search_text import match_expression

_MESSAGE_COLUMNS: Final = ", ".join("m." + c.strip() for c in COLUMNS.split(","))

# The full-text search: FTS5's matches newest first (the index's rowid is the accept
# sequence), joined to their rows by the accept sequence; ``state`` and
# ``session`` (None: any) are checked on the row itself.  A sender finds its channel
# message once, not once more per member's copy; a member finds its own copy.
SEARCH_SQL: Final = (
    f"SELECT {_MESSAGE_COLUMNS} FROM swarm_search"
    " JOIN swarm_messages AS m ON m.accept_seq = swarm_search.rowid"
    " WHERE swarm_search MATCH :match"
    " AND (:state IS NULL OR m.state = :state)"
    " AND (:session IS NULL OR m.to_session = :session"
    " OR (m.from_session = :session AND m.channel_msg_id IS NULL))"
    " ORDER BY swarm_search.rowid DESC LIMIT :limit OFFSET :offset"
)

# Pages of the search index merged after each prune batch (see after_prune).
SEARCH_MERGE_PAGES: Final = 200


def _has_table(conn: Connection, name: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return found is not None


class SqliteEngine:
    """The SQLite engine (see the module)."""

    name: Final = "sqlite"
    begin_write: Final = "BEGIN IMMEDIATE"
    shared: Final = False
    reclaims_space_itself: Final = False

    def sql(self, query: EngineSql) -> str:
        return query.sqlite

    def open_writer(self, db: Path | str, *, busy_timeout_ms: int, log: EventLog) -> Connection:
        return open_database(db, busy_timeout_ms=busy_timeout_ms, log=log)

    def open_reader(self, db: Path | str, *, busy_timeout_ms: int) -> Connection:
        conn = connect(db, busy_timeout_ms=busy_timeout_ms)
        conn.execute("PRAGMA query_only = 1")
        return conn

    def open_existing(self, db: Path | str) -> Connection:
        return open_existing_sqlite(db)

    def search(self, text: str, session: str | None) -> tuple[str, Mapping[str, object]]:
        return SEARCH_SQL, {"match": match_expression(text, session), "session": session}

    def has_search_upkeep(self, conn: Connection) -> bool:
        return _has_table(conn, "swarm_search_pending")

    def index_pending(self, conn: Connection) -> None:
        if conn.execute("SELECT EXISTS (SELECT 1 FROM swarm_search_pending)").fetchone()[0]:
            conn.execute(INDEX_PENDING_SQL)
            conn.execute(CLEAR_PENDING_SQL)

    def after_prune(self, conn: Connection) -> None:
        """Merge a bounded part of the search index (migration 13): FTS5 records a delete
        as a tombstone beside the entry it cancels, and only a merge drops both, so without
        this the index would keep the pruned rows' size.  A negative budget merges even
        small levels, as an incremental 'optimize' (SEARCH_MERGE_PAGES pages at most)."""
        if _has_table(conn, "swarm_search"):
            conn.execute(
                "INSERT INTO swarm_search (swarm_search, rank) VALUES ('merge', ?)",
                (-SEARCH_MERGE_PAGES,),
            )

    def lock_queue_bytes(self, conn: Connection) -> None:
        pass  # the write transaction already holds the file's one write lock

    def notify_accepted(self, conn: Connection, first_seq: int, last_seq: int) -> None:
        pass  # one daemon serves a file, and it knows what it accepted

    def notify_due(self, conn: Connection, targets: Sequence[str]) -> None:
        pass

    def notify_changed(self, conn: Connection) -> None:
        pass  # every write changes the file or its -wal: the quiet tick stats them

    def file_size(self, conn: Connection) -> FileSize:
        def pragma(name: str) -> int:
            return int(conn.execute(f"PRAGMA {name}").fetchone()[0])

        return FileSize(
            page_count=pragma("page_count"),
            page_size=pragma("page_size"),
            free_pages=pragma("freelist_count"),
            incremental=pragma("auto_vacuum") == AUTO_VACUUM_INCREMENTAL,
        )

    def give_back_pages(self, conn: Connection, max_pages: int) -> int:
        """``PRAGMA incremental_vacuum`` yields one row per page it frees and stops when
        the caller stops stepping; ``executescript`` steps it to the end, as its own short
        write transaction.  Nothing happens (0) unless the database is in incremental
        auto-vacuum mode.  The WAL is then checkpointed without waiting on readers, so the
        file itself shrinks now rather than at the next automatic checkpoint."""
        if not isinstance(conn, sqlite3.Connection):
            raise TypeError("a SQLite engine was given another engine's connection")
        before = self.file_size(conn)
        if not before.incremental or before.free_pages == 0 or max_pages <= 0:
            return 0
        try:
            conn.executescript(f"PRAGMA incremental_vacuum({int(max_pages)})")
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except UNAVAILABLE_ERRORS as e:
            raise StorageUnavailable(f"database write failed: {e}") from e
        return max(before.page_count - self.file_size(conn).page_count, 0)


SQLITE: Final = SqliteEngine()
