"""Opening the database and bringing its schema up to date.

The schema is versioned with ``PRAGMA user_version``: each entry of
``MIGRATIONS`` moves the database one version forward, inside one
transaction, so a crash mid-upgrade leaves the old version intact.  Version 1
is the seed design's table exactly as the TypeScript daemon created it (with
``IF NOT EXISTS``), so a database written by that daemon (``user_version`` 0
but the table present) is adopted and upgraded in place.

Every database is kept in ``auto_vacuum = INCREMENTAL`` mode, so the pages
that pruning frees (storage/retention.py) can be given back to the file
system.  A new file gets it at creation; an older file needs one ``VACUUM``,
which cannot run inside a migration's transaction: :func:`open_database` runs
it after the migrations, once, and logs it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from pigeond.private_files import create_private_file, make_private_dirs, tighten
from pigeond.storage.errors import SchemaError

# The priority order, as one SQL expression: the ready-head index is built on
# it and the head query orders by it, so the two must be the same text.
PRIORITY_RANK_SQL = "(CASE priority WHEN 'urgent' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END)"

# Which rows are done, and so may be pruned once old enough: direct messages
# verified in their target's transcript, failed, expired, cancelled or dropped;
# and every channel message (stored, never delivered).  Never a queued direct
# message, nor a hand-off still waiting to be verified.  The prunable index is
# partial on this expression and the pruner's queries say it word for word
# (SQLite uses a partial index only then), so the two must be the same text;
# changing it takes a migration that rebuilds the index (as migration 6 did).
PRUNABLE_SQL = (
    "(channel IS NOT NULL OR state IN ('failed', 'expired', 'cancelled', 'dropped')"
    " OR (state = 'handed_off' AND verified_at IS NOT NULL))"
)
# The expression migration 5 created the index with, kept as it was: a migration
# must do on an old file exactly what it always did.
_PRUNABLE_SQL_V5 = (
    "(channel IS NOT NULL OR state IN ('failed', 'expired', 'cancelled')"
    " OR (state = 'handed_off' AND verified_at IS NOT NULL))"
)
# PRAGMA auto_vacuum's value for INCREMENTAL.
AUTO_VACUUM_INCREMENTAL = 2


class EventLog(Protocol):
    """Where the schema's one-time conversions are told (the daemon passes its logger;
    the storage package itself loads no logging framework, so the CLIs stay light)."""

    def info(self, format: str, **kwargs: object) -> None: ...

    def warn(self, format: str, **kwargs: object) -> None: ...


class _Silent:
    def info(self, format: str, **kwargs: object) -> None:
        pass

    def warn(self, format: str, **kwargs: object) -> None:
        pass


SILENT: EventLog = _Silent()

_V1_SEED = """
CREATE TABLE IF NOT EXISTS swarm_messages (
    msg_id        TEXT PRIMARY KEY,
    from_session  TEXT NOT NULL,
    to_session    TEXT,
    channel       TEXT,
    kind          TEXT NOT NULL,
    priority      TEXT NOT NULL DEFAULT 'normal',
    reply_to      TEXT,
    payload       TEXT NOT NULL,
    state         TEXT NOT NULL DEFAULT 'queued',
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_retry_at INTEGER,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    handed_off_at INTEGER
);
CREATE INDEX IF NOT EXISTS idx_swarm_target_state
    ON swarm_messages (to_session, state, next_retry_at, created_at);
CREATE INDEX IF NOT EXISTS idx_swarm_inbox
    ON swarm_messages (to_session, state, msg_id);
CREATE INDEX IF NOT EXISTS idx_swarm_channel
    ON swarm_messages (channel, state, created_at);
"""

_V2_SEQUENCES = f"""
ALTER TABLE swarm_messages ADD COLUMN last_error TEXT;
ALTER TABLE swarm_messages ADD COLUMN accept_seq INTEGER;
ALTER TABLE swarm_messages ADD COLUMN handoff_seq INTEGER;

CREATE TABLE swarm_sequences (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);

-- Rows written by the seed daemon get sequence numbers in the order they
-- were accepted and handed off.
UPDATE swarm_messages SET accept_seq = ordered.n
FROM (SELECT msg_id, ROW_NUMBER() OVER (ORDER BY created_at, rowid) AS n
      FROM swarm_messages) AS ordered
WHERE ordered.msg_id = swarm_messages.msg_id;

UPDATE swarm_messages SET handoff_seq = ordered.n
FROM (SELECT msg_id, ROW_NUMBER() OVER (ORDER BY handed_off_at, accept_seq) AS n
      FROM swarm_messages WHERE state = 'handed_off') AS ordered
WHERE ordered.msg_id = swarm_messages.msg_id;

INSERT INTO swarm_sequences (name, value)
    SELECT 'accept', COALESCE(MAX(accept_seq), 0) FROM swarm_messages;
INSERT INTO swarm_sequences (name, value)
    SELECT 'handoff', COALESCE(MAX(handoff_seq), 0) FROM swarm_messages;

-- Which targets have a due message: covers the arbiter's per-tick query and
-- holds queued rows only, so delivered history does not make it slower.
CREATE INDEX idx_swarm_ready
    ON swarm_messages (state, next_retry_at, to_session)
    WHERE state = 'queued';
-- The head of one target's queue: priority, then accept order.
CREATE INDEX idx_swarm_target_head
    ON swarm_messages (to_session, {PRIORITY_RANK_SQL}, accept_seq)
    WHERE state = 'queued';
-- The inbox: a target's hand-offs in hand-off order.
CREATE INDEX idx_swarm_handoff
    ON swarm_messages (to_session, handoff_seq)
    WHERE handoff_seq IS NOT NULL;
CREATE UNIQUE INDEX idx_swarm_accept_seq ON swarm_messages (accept_seq);
"""

_V3_DELIVERY = """
ALTER TABLE swarm_messages ADD COLUMN verified_at INTEGER;
ALTER TABLE swarm_messages ADD COLUMN verify_by INTEGER;
ALTER TABLE swarm_messages ADD COLUMN requeue_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE swarm_messages ADD COLUMN expires_at INTEGER;

-- Queued direct messages by expiry time, for the sweeper.
CREATE INDEX idx_swarm_expiry
    ON swarm_messages (expires_at)
    WHERE state = 'queued' AND to_session IS NOT NULL AND expires_at IS NOT NULL;
-- Hand-offs still waiting to be found in their target's transcript.
CREATE INDEX idx_swarm_unverified
    ON swarm_messages (to_session, verify_by)
    WHERE state = 'handed_off' AND verify_by IS NOT NULL;
"""

# Which agent and model each hand-off named (the target's own, never a default
# that switches its mode), and why, when pigeond had to name less than that.
_V4_HANDOFF_MODE = """
ALTER TABLE swarm_messages ADD COLUMN handoff_agent TEXT;
ALTER TABLE swarm_messages ADD COLUMN handoff_provider TEXT;
ALTER TABLE swarm_messages ADD COLUMN handoff_model TEXT;
ALTER TABLE swarm_messages ADD COLUMN handoff_variant TEXT;
ALTER TABLE swarm_messages ADD COLUMN handoff_note TEXT;
"""

# Done rows by age, for the pruner: partial, so queued and unverified rows (the
# ones the arbiter keeps changing) never touch it, and finding the oldest done
# rows costs the same whatever the size of the live queue.
_V5_RETENTION = f"""
CREATE INDEX idx_swarm_prunable
    ON swarm_messages (updated_at)
    WHERE {_PRUNABLE_SQL_V5};
"""

# A delivery.failed notice nobody could take (its addressee is no live session, as
# with `pigeon-send --from ses_me`) is 'dropped', not 'failed': operators have
# nothing to fix and the failed count stays the count of real failures.  Notices
# that ended before this migration are moved over; the prunable index learns the
# new state.
_V6_DROPPED = f"""
UPDATE swarm_messages SET state = 'dropped'
    WHERE kind = 'delivery.failed' AND state IN ('failed', 'expired');
DROP INDEX idx_swarm_prunable;
CREATE INDEX idx_swarm_prunable
    ON swarm_messages (updated_at)
    WHERE {PRUNABLE_SQL};
"""

# Direct messages by state, for the operator's reads (``pigeon``, ``pigeon-tui``, /health).
# Counting by state walks it in state order, where it sorted every direct message into a
# temporary b-tree (with a million delivered rows: 0.1 s instead of 0.4-0.7 s), and the
# failed messages per target are a SEARCH on state, not a walk of every direct message
# (2 ms instead of 0.12 s); the TUI's snapshot read went from 0.6 s to 0.13 s
# (bench/history_table.py, tests/test_history_plans.py).  Partial, so channel messages
# never enter it; an accept adds one small entry, a state change moves it.
_V7_DIRECT_STATE = """
CREATE INDEX idx_swarm_direct_state
    ON swarm_messages (state)
    WHERE to_session IS NOT NULL;
"""

Migration = Callable[[sqlite3.Connection], None]


def _script(sql: str) -> Migration:
    def apply(conn: sqlite3.Connection) -> None:
        # executescript would COMMIT first; run statement by statement instead
        # so the migration and its user_version bump share one transaction.
        for statement in _split_statements(sql):
            conn.execute(statement)

    return apply


def _split_statements(sql: str) -> list[str]:
    statements: list[str] = []
    pending = ""
    for line in sql.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        raise ValueError(f"incomplete SQL statement in migration: {pending.strip()[:60]}")
    return statements


MIGRATIONS: list[Migration] = [
    _script(_V1_SEED),
    _script(_V2_SEQUENCES),
    _script(_V3_DELIVERY),
    _script(_V4_HANDOFF_MODE),
    _script(_V5_RETENTION),
    _script(_V6_DROPPED),
    _script(_V7_DIRECT_STATE),
]
SCHEMA_VERSION = len(MIGRATIONS)
# How long a write waits for a lock another process holds before it fails (503 for a send).
DEFAULT_BUSY_TIMEOUT_MS = 5000


def connect(
    path: Path | str, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
) -> sqlite3.Connection:
    """Open the database in WAL mode with durable commits.

    ``synchronous=FULL`` makes every commit reach the disk before it returns,
    which is what lets a 202 promise that the message is stored.
    """
    try:
        conn = sqlite3.connect(
            str(path), isolation_level=None, timeout=busy_timeout_ms / 1000, check_same_thread=False
        )
    except sqlite3.Error as e:
        raise SchemaError(f"{path}: cannot open the database ({e})") from e
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if conn.execute("PRAGMA page_count").fetchone()[0] == 0:
            # A new file: incremental from its first page, which WAL mode writes next.
            # (On an existing file this would take the write lock, and do nothing
            # without a VACUUM: see use_incremental_vacuum.)
            conn.execute(f"PRAGMA auto_vacuum = {AUTO_VACUUM_INCREMENTAL}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise SchemaError(f"{path}: could not switch the database to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous = FULL")
    except sqlite3.DatabaseError as e:
        conn.close()
        raise SchemaError(f"{path}: not a usable SQLite database ({e})") from e
    except BaseException:
        conn.close()
        raise
    return conn


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection, migrations: list[Migration] | None = None) -> int:
    """Apply every missing migration; return the resulting schema version."""
    steps = MIGRATIONS if migrations is None else migrations
    current = schema_version(conn)
    if current > len(steps):
        raise SchemaError(
            f"the database has schema version {current}, newer than this pigeond "
            f"understands ({len(steps)}); upgrade pigeond"
        )
    for version in range(current + 1, len(steps) + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            steps[version - 1](conn)
            conn.execute(f"PRAGMA user_version = {version}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return schema_version(conn)


def open_database(
    path: Path | str, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS, log: EventLog = SILENT
) -> sqlite3.Connection:
    """Create the parent folder, open, and migrate: what the daemon does at start.

    Folders it creates are 0700 and the database, WAL and shared-memory files
    0600 (SQLite gives the WAL and -shm files the database's own mode)."""
    target = Path(path)
    make_private_dirs(target.parent)
    create_private_file(target)
    for companion in ("-wal", "-shm"):
        tighten(str(target) + companion)
    conn = connect(target, busy_timeout_ms=busy_timeout_ms)
    try:
        migrate(conn)
        use_incremental_vacuum(conn, target, log)
    except sqlite3.DatabaseError as e:
        conn.close()
        raise SchemaError(f"{path}: could not upgrade the database schema ({e})") from e
    except BaseException:
        conn.close()
        raise
    return conn


def use_incremental_vacuum(conn: sqlite3.Connection, path: Path, log: EventLog = SILENT) -> bool:
    """Switch a database made before pigeond pruned to ``auto_vacuum = INCREMENTAL``.

    Only a ``VACUUM`` can switch a file that has tables: it rewrites the whole
    file (for a while its size again in the WAL, and in a temporary file), so it
    runs once, outside any transaction, and is logged.  It is not fatal: when
    it fails (disk full, another writer holding the lock) pigeond runs on,
    pruned rows' pages are reused but the file does not shrink, and the next
    start tries again.  Returns whether the database is now incremental.
    """
    if _auto_vacuum(conn) == AUTO_VACUUM_INCREMENTAL:
        return True
    size = _size_bytes(conn)
    log.info(
        "converting {path} to incremental auto-vacuum, so pruning can shrink it:"
        " a one-time VACUUM of {mib:.1f} MiB",
        path=str(path), mib=size / 2**20,
    )  # fmt: skip
    try:
        conn.execute(f"PRAGMA auto_vacuum = {AUTO_VACUUM_INCREMENTAL}")
        conn.execute("VACUUM")
        # VACUUM wrote the whole database into the WAL: give that space back too
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.DatabaseError as e:
        log.warn(
            "could not convert {path} to incremental auto-vacuum ({error}); pruned rows'"
            " space is reused but the file does not shrink; trying again at the next start",
            path=str(path), error=str(e),
        )  # fmt: skip
        return False
    log.info(
        "{path} now uses incremental auto-vacuum ({mib:.1f} MiB)",
        path=str(path), mib=_size_bytes(conn) / 2**20,
    )  # fmt: skip
    return _auto_vacuum(conn) == AUTO_VACUUM_INCREMENTAL


def _auto_vacuum(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0])


def _size_bytes(conn: sqlite3.Connection) -> int:
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    return pages * int(conn.execute("PRAGMA page_size").fetchone()[0])
