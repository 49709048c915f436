"""PostgreSQL, the backend for a swarm on more than one host (SQLite stays the default).

``--db postgresql://…`` (any libpq URL) selects it: :func:`open_postgres` connects and
brings the schema up to date, one daemon at a time.  The password of a URL is never
printed: :func:`redacted` is how a URL is shown.
"""

from __future__ import annotations

import psycopg

from pigeond.db_url import error_line, is_postgres_url, redacted
from pigeond.storage.errors import SchemaError, StorageUnavailable
from pigeond.storage.postgres.connection import PgConnection
from pigeond.storage.postgres.schema import (
    BASELINE,
    BASELINE_VERSION,
    MIGRATION_LOCK,
    PG_MIGRATIONS,
    VERSION_TABLE,
)

__all__ = ["PgConnection", "is_postgres_url", "migrate", "open_postgres", "redacted"]


def schema_version(conn: PgConnection) -> int:
    row = conn.execute("SELECT version FROM swarm_schema").fetchone()
    return 0 if row is None else int(row[0])


def migrate(
    conn: PgConnection, baseline: str = BASELINE, steps: tuple[str, ...] = PG_MIGRATIONS
) -> int:
    """Make a new database's schema (``baseline``, at BASELINE_VERSION), then apply every
    missing migration after it, each in its own transaction, holding the migration lock so
    that daemons starting together do not both apply one; the version now."""
    conn.execute_script(VERSION_TABLE)
    latest = BASELINE_VERSION + len(steps)
    while True:
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
            current = schema_version(conn)
            if current > latest:
                raise SchemaError(
                    f"the database has schema version {current}, newer than this pigeond"
                    f" understands ({latest}); upgrade pigeond"
                )
            if 0 < current < BASELINE_VERSION:
                raise SchemaError(
                    f"the database has schema version {current}, from a development build"
                    f" before PostgreSQL's first schema ({BASELINE_VERSION}); make it again"
                )
            if current == latest:
                conn.execute("COMMIT")
                return current
            if current == 0:
                conn.execute_script(baseline)
                reached = BASELINE_VERSION
            else:
                conn.execute_script(steps[current - BASELINE_VERSION])
                reached = current + 1
            conn.execute(
                "INSERT INTO swarm_schema (only_row, version) VALUES (TRUE, ?)"
                " ON CONFLICT (only_row) DO UPDATE SET version = excluded.version",
                (reached,),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


def open_postgres(
    url: str, *, read_only: bool = False, lock_timeout_ms: int | None = None
) -> PgConnection:
    """Connect to the database at ``url`` and bring its schema up to date (a reader
    connection only connects); from then on its write transactions go pipelined
    (pigeond/storage/postgres/connection.py).  A write waits at most ``lock_timeout_ms``
    for a row lock another session holds.  SchemaError for a database this pigeond
    cannot use, StorageUnavailable when PostgreSQL cannot be reached."""
    try:
        conn = PgConnection(url, read_only=read_only, lock_timeout_ms=lock_timeout_ms)
    except psycopg.OperationalError as e:
        raise StorageUnavailable(
            f"{redacted(url)}: cannot connect to PostgreSQL ({error_line(e, url)})"
        ) from e
    except psycopg.ProgrammingError as e:
        raise SchemaError(
            f"{redacted(url)}: not a usable PostgreSQL URL ({error_line(e, url)})"
        ) from e
    if read_only:
        return conn
    try:
        migrate(conn)
    except psycopg.OperationalError as e:
        conn.close()
        raise StorageUnavailable(
            f"{redacted(url)}: PostgreSQL went away ({error_line(e, url)})"
        ) from e
    except psycopg.Error as e:
        conn.close()
        raise SchemaError(
            f"{redacted(url)}: could not upgrade the database schema ({error_line(e, url)})"
        ) from e
    except BaseException:
        conn.close()
        raise
    conn.pipelined_writes = True  # the schema is up to date: see PgConnection
    return conn
