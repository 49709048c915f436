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
from pathlib import Path
from typing import Protocol

from pigeond.private_files import create_private_file, make_private_dirs, tighten
from pigeond.storage.errors import SchemaError
from pigeond.storage.migrations import MIGRATIONS, Migration

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
