"""PostgreSQL's schema: one baseline, today's schema, the same as SQLite's at its version."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from pigeond.storage import SCHEMA_VERSION, open_database
from pigeond.storage.errors import SchemaError
from pigeond.storage.postgres import open_postgres
from pigeond.storage.postgres.schema import PG_SCHEMA_VERSION, VERSION_TABLE

# What one engine alone has: SQLite's FTS5 index (and its shadow and pending tables); PostgreSQL's
# schema version table and its generated search column, under its GIN index.
SQLITE_ALONE = ("swarm_search",)
POSTGRES_ALONE = ("swarm_schema", "search_doc", "idx_swarm_search")


def sqlite_schema(db_path: Path) -> set[str]:
    conn = open_database(db_path)
    try:
        tables = [
            str(r[0])
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not str(r[0]).startswith(("sqlite_", *SQLITE_ALONE))
        ]
        found = {f"table {t}" for t in tables}
        for table in tables:
            found |= {f"{table}.{r[1]}" for r in conn.execute(f"PRAGMA table_info({table})")}
        indexes = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        found |= {f"index {r[0]}" for r in indexes if str(r[0]).startswith("idx_")}
        return found
    finally:
        conn.close()


def postgres_schema(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = 'public'"
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'public'"
            " AND indexname LIKE 'idx_%'"
        ).fetchall()
    found = {f"table {t}" for t, _ in columns} | {f"{t}.{c}" for t, c in columns}
    found |= {f"index {i}" for (i,) in indexes}
    return {f for f in found if not set(re.split(r"[ .]", f)) & set(POSTGRES_ALONE)}


def test_postgresql_is_brought_to_sqlite_s_schema_version() -> None:
    """Every migration after the baseline goes to both engines: the versions stay one."""
    assert PG_SCHEMA_VERSION == SCHEMA_VERSION


def test_the_baseline_has_sqlite_s_tables_columns_and_indexes(
    pg_migrated_url: str, db_path: Path
) -> None:
    """A new PostgreSQL database has what SQLite's has at the same version, by name."""
    assert postgres_schema(pg_migrated_url) == sqlite_schema(db_path)


def test_a_database_older_than_the_baseline_is_refused(pg_url: str) -> None:
    """A schema version below the baseline (a development build's) is not upgraded."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(VERSION_TABLE)
        conn.execute("INSERT INTO swarm_schema (version) VALUES (5)")
    with pytest.raises(SchemaError, match="schema version 5"):
        open_postgres(pg_url)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('swarm_messages')").fetchone() == (None,)
