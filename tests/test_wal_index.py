"""The wal-index header of a real SQLite WAL database: it changes with each commit a
reader can see, and with nothing else."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeond.service.wal_index import HEADER_BYTES, wal_index_header


@pytest.fixture
def wal_db(tmp_path: Path) -> Iterator[tuple[str, sqlite3.Connection]]:
    """A WAL database with one table, its connection kept open (as the daemon keeps its)."""
    path = str(tmp_path / "w.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x INTEGER)")
    yield path, conn
    conn.close()


def test_a_commit_changes_the_header(wal_db: tuple[str, sqlite3.Connection]) -> None:
    """Each commit, even of a row of the same size, gives a new header."""
    path, conn = wal_db
    seen = [wal_index_header(path)]
    for _ in range(3):
        conn.execute("INSERT INTO t VALUES (1)")
        seen.append(wal_index_header(path))
    assert len(set(seen)) == 4 and all(h is not None and len(h) == HEADER_BYTES for h in seen)


def test_a_commit_by_another_connection_changes_the_header(
    wal_db: tuple[str, sqlite3.Connection],
) -> None:
    """Another process's write (another connection) is counted as the daemon's own is."""
    path, _ = wal_db
    before = wal_index_header(path)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("UPDATE t SET x = 2")
    other.execute("INSERT INTO t VALUES (3)")
    other.close()
    assert wal_index_header(path) != before


def test_reads_and_empty_transactions_leave_it_alone(
    wal_db: tuple[str, sqlite3.Connection],
) -> None:
    """A read, or a transaction that writes nothing, is no change."""
    path, conn = wal_db
    conn.execute("INSERT INTO t VALUES (1)")
    before = wal_index_header(path)
    conn.execute("SELECT * FROM t").fetchall()
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("COMMIT")
    assert wal_index_header(path) == before


def test_a_database_without_a_wal_index_has_no_header(tmp_path: Path) -> None:
    """A rollback-journal database (or none at all) has no header to read."""
    path = str(tmp_path / "j.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    assert wal_index_header(path) is None
    conn.close()
    assert wal_index_header(str(tmp_path / "missing.db")) is None
