"""Bulk synthetic history for benchmarks and query-plan tests.

Inserting a million rows through :meth:`SwarmRepository.accept` would fsync a
million times; one recursive-CTE insert builds the same shape of table in a
few seconds.  Never used by the daemon itself.
"""

from __future__ import annotations

import sqlite3


def add_delivered_history(conn: sqlite3.Connection, rows: int, targets: int, now_ms: int) -> None:
    """Add ``rows`` handed-off messages spread over ``targets`` sessions, then ANALYZE."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        base = conn.execute("SELECT value FROM swarm_sequences WHERE name = 'accept'").fetchone()[0]
        hbase = conn.execute("SELECT value FROM swarm_sequences WHERE name = 'handoff'").fetchone()[
            0
        ]
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, priority,"
            " payload, state, attempts, next_retry_at, created_at, updated_at, handed_off_at,"
            " accept_seq, handoff_seq)"
            " SELECT printf('msg_hist%d', i + ?), 'ses_sender', printf('ses_t%d', i % ?), 'chat',"
            " 'normal', 'history', 'handed_off', 0, NULL, ? - i, ? - i, ? - i, i + ?, i + ?"
            " FROM n",
            (rows, base, max(targets, 1), now_ms, now_ms, now_ms, base, hbase),
        )
        conn.execute("UPDATE swarm_sequences SET value = value + ? WHERE name = 'accept'", (rows,))
        conn.execute("UPDATE swarm_sequences SET value = value + ? WHERE name = 'handoff'", (rows,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("ANALYZE")
