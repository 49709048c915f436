"""Bulk synthetic history for benchmarks and query-plan tests.

Inserting a million rows through :meth:`SwarmRepository.accept` would fsync a
million times; one recursive-CTE insert builds the same shape of table in a
few seconds.  Never used by the daemon itself.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final

from pigeond.storage.migrations import CLEAR_PENDING_SQL, INDEX_PENDING_SQL
from pigeond.storage.schema import connect

# The indexes the seed daemon created (schema version 1); every other index on
# swarm_messages came with pigeond.
SEED_INDEXES: Final = frozenset({"idx_swarm_target_state", "idx_swarm_inbox", "idx_swarm_channel"})


def _message_indexes(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """Name and CREATE statement of every explicit index on swarm_messages."""
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_master"
        " WHERE type = 'index' AND tbl_name = 'swarm_messages' AND sql IS NOT NULL"
        " ORDER BY name"
    ).fetchall()
    return [(str(name), str(sql)) for name, sql in rows]


def index_pending(conn: sqlite3.Connection) -> None:
    """Index the rows the search trigger noted, as pigeond's writes do before COMMIT (in
    one statement); nothing on a database from before the search migration."""
    if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'swarm_search_pending'"
    ).fetchone():
        conn.execute(INDEX_PENDING_SQL)
        conn.execute(CLEAR_PENDING_SQL)


def add_delivered_history(
    conn: sqlite3.Connection, rows: int, targets: int, now_ms: int, payload_sql: str = "'history'"
) -> None:
    """Add ``rows`` handed-off messages spread over ``targets`` sessions, then ANALYZE.
    ``payload_sql`` is the payload as an SQL expression of the row number ``i`` (the search
    benchmark gives words of different frequencies).

    The explicit indexes are dropped for the insert and rebuilt from the full
    table in the same transaction: sorting a million keys once is several times
    faster than a million scattered b-tree inserts.  msg_ids are zero-padded
    so that the primary key, which cannot be dropped, is filled in order.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        base = conn.execute("SELECT value FROM swarm_sequences WHERE name = 'accept'").fetchone()[0]
        hbase = conn.execute("SELECT value FROM swarm_sequences WHERE name = 'handoff'").fetchone()[
            0
        ]
        indexes = _message_indexes(conn)
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, priority,"
            " payload, state, attempts, next_retry_at, created_at, updated_at, handed_off_at,"
            " accept_seq, handoff_seq)"
            " SELECT printf('msg_hist%012d', i + ?), 'ses_sender', printf('ses_t%d', i % ?),"
            f" 'chat', 'normal', {payload_sql}, 'handed_off', 0, NULL, ? - i, ? - i, ? - i, i + ?,"
            " i + ?"
            " FROM n",
            (rows, base, max(targets, 1), now_ms, now_ms, now_ms, base, hbase),
        )
        for _, sql in indexes:
            conn.execute(sql)
        conn.execute("UPDATE swarm_sequences SET value = value + ? WHERE name = 'accept'", (rows,))
        conn.execute("UPDATE swarm_sequences SET value = value + ? WHERE name = 'handoff'", (rows,))
        index_pending(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("ANALYZE")


def add_queued_rows(
    conn: sqlite3.Connection, rows: int, targets: int, now_ms: int, payload_bytes: int
) -> None:
    """Add ``rows`` queued messages of ``payload_bytes`` ASCII bytes each, spread over
    ``targets`` sessions (what max_queued_bytes sums: bench/queue_bytes_table.py)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        base = conn.execute("SELECT value FROM swarm_sequences WHERE name = 'accept'").fetchone()[0]
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, priority,"
            " payload, state, attempts, next_retry_at, created_at, updated_at, accept_seq)"
            " SELECT printf('msg_queued%012d', i + ?), 'ses_sender', printf('ses_q%d', i % ?),"
            " 'chat', 'normal', substr(printf('%0*d', ?, i), 1, ?), 'queued', 0, ?, ?, ?, i + ?"
            " FROM n",
            (rows, base, max(targets, 1), payload_bytes, payload_bytes, now_ms, now_ms, now_ms,
             base),
        )  # fmt: skip
        conn.execute("UPDATE swarm_sequences SET value = value + ? WHERE name = 'accept'", (rows,))
        index_pending(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("ANALYZE")


def drop_statistics(conn: sqlite3.Connection) -> None:
    """Forget what ANALYZE gathered, so the planner uses its defaults.

    This is the state of a database the daemon wrote: neither the seed daemon
    nor pigeond ever runs ANALYZE.
    """
    conn.execute("DROP TABLE IF EXISTS sqlite_stat1")
    conn.execute("DROP TABLE IF EXISTS sqlite_stat4")
    # A connection keeps the statistics it has loaded, dropped tables or not,
    # until it is told to reread them; rereading leaves an empty sqlite_stat1.
    conn.execute("ANALYZE sqlite_master")


def seed_baseline_copy(
    conn: sqlite3.Connection, path: Path | str, *, keep_statistics: bool = False
) -> sqlite3.Connection:
    """Copy the database to ``path`` as the seed daemon would have it: its indexes only.

    Every index that pigeond added is dropped, so the queries run as the seed's
    did.  Statistics are dropped too unless ``keep_statistics``: the seed never
    ran ANALYZE.  Returns a WAL connection to the copy.
    """
    plain = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.backup(plain)
    finally:
        plain.close()
    copy = connect(path)
    try:
        copy.execute("BEGIN IMMEDIATE")
        for name, _ in _message_indexes(copy):
            if name not in SEED_INDEXES:
                copy.execute(f'DROP INDEX "{name}"')
        if not keep_statistics:
            drop_statistics(copy)
        copy.execute("COMMIT")
    except BaseException:
        copy.close()
        raise
    return copy


def add_stuck_rows(
    conn: sqlite3.Connection, queued: int, failed: int, targets: int, now_ms: int
) -> None:
    """Add ``queued`` waiting and ``failed`` failed direct messages over ``targets`` sessions,
    as an operator meets them after a long outage (for the TUI benchmark)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        base = conn.execute("SELECT value FROM swarm_sequences WHERE name = 'accept'").fetchone()[0]
        total = queued + failed
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, priority,"
            " payload, state, attempts, next_retry_at, created_at, updated_at, last_error,"
            " accept_seq, expires_at)"
            " SELECT printf('msg_stuck%012d', i + ?), printf('ses_sender%d', i % 7),"
            " printf('ses_t%d', i % ?), 'chat', 'normal', printf('stuck payload %d', i),"
            " CASE WHEN i <= ? THEN 'queued' ELSE 'failed' END,"
            " CASE WHEN i <= ? THEN 3 ELSE 10 END,"
            " CASE WHEN i <= ? THEN ? + 60000 ELSE NULL END,"
            " ? - i * 10, ? - i * 10, 'HTTP 500: synthetic', i + ?, ? + 86400000 FROM n",
            (total, base, max(targets, 1), queued, queued, queued, now_ms, now_ms, now_ms,
             base, now_ms),
        )  # fmt: skip
        conn.execute("UPDATE swarm_sequences SET value = value + ? WHERE name = 'accept'", (total,))
        index_pending(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
