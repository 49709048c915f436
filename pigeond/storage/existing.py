"""Opening a database that must already exist, at the current schema: what an operator's
tool opens (the ``pigeon`` CLI, the TUI).  It never creates or migrates a database, and
names a URL only without its password (:func:`pigeond.db_url.redacted`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from pigeond.db_url import error_line, redacted
from pigeond.storage.errors import SchemaError, StorageUnavailable
from pigeond.storage.postgres import schema_version
from pigeond.storage.postgres.connection import PgConnection
from pigeond.storage.postgres.pooled import shared_pool
from pigeond.storage.postgres.schema import PG_SCHEMA_VERSION
from pigeond.storage.schema import DEFAULT_BUSY_TIMEOUT_MS, SCHEMA_VERSION, connect


def open_existing_sqlite(path: Path | str) -> sqlite3.Connection:
    """The SQLite file at ``path`` (WAL, busy timeout).  SchemaError (one line) when it is
    missing, unreadable, not a pigeond database, or of another schema version."""
    target = Path(path)
    if not target.is_file():
        raise SchemaError(f"{path}: no such database file (is pigeond's --db elsewhere?)")
    try:
        probe = sqlite3.connect(f"{target.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise SchemaError(f"{path}: cannot open the database ({e})") from e
    try:
        version = int(probe.execute("PRAGMA user_version").fetchone()[0])
        has_table = probe.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'swarm_messages'"
        ).fetchone()
    except sqlite3.DatabaseError as e:
        raise SchemaError(f"{path}: not a usable SQLite database ({e})") from e
    finally:
        probe.close()
    if has_table is None:
        raise SchemaError(f"{path}: not a pigeond database (no swarm_messages table)")
    check_version(str(path), version, SCHEMA_VERSION)
    return connect(target)


def open_existing_postgres(url: str) -> PgConnection:
    """Connect (writes wait for a row lock as long as SQLite's busy timeout) and check
    that ``swarm_schema`` says the current version; nothing is created or migrated."""
    shown = redacted(url)
    try:
        pool = shared_pool(url, DEFAULT_BUSY_TIMEOUT_MS)
        conn = PgConnection(url, lock_timeout_ms=DEFAULT_BUSY_TIMEOUT_MS, pool=pool)
    except psycopg.OperationalError as e:
        detail = error_line(e, url)
        raise StorageUnavailable(f"{shown}: cannot connect to PostgreSQL ({detail})") from e
    except psycopg.Error as e:
        raise SchemaError(f"{shown}: not a usable PostgreSQL URL ({error_line(e, url)})") from e
    try:
        row = conn.execute("SELECT to_regclass('swarm_schema') IS NOT NULL").fetchone()
        if row is None or not row[0]:
            raise SchemaError(f"{shown}: not a pigeond database (no swarm_schema table)")
        check_version(shown, schema_version(conn), PG_SCHEMA_VERSION)
    except psycopg.OperationalError as e:
        conn.close()
        detail = error_line(e, url)
        raise StorageUnavailable(f"{shown}: PostgreSQL went away ({detail})") from e
    except psycopg.Error as e:
        conn.close()
        raise SchemaError(f"{shown}: not a usable pigeond database ({error_line(e, url)})") from e
    except BaseException:
        conn.close()
        raise
    return conn


def check_version(shown: str, version: int, current: int) -> None:
    """SchemaError unless ``version`` is ``current``, saying which side to upgrade."""
    if version > current:
        raise SchemaError(
            f"{shown}: schema version {version} is newer than this pigeon understands"
            f" ({current}); upgrade pigeond"
        )
    if version < current:
        raise SchemaError(
            f"{shown}: schema version {version} is older than {current};"
            " start pigeond once to upgrade it"
        )
