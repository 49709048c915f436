"""A writer's transaction on PostgreSQL goes in one pipeline: statements whose answers
nobody reads travel together, COMMIT waits for every answer, and an error anywhere
fails the transaction as a statement's error always did."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import pq

from pigeond.storage.postgres import open_postgres
from pigeond.storage.postgres.connection import PgConnection


@pytest.fixture
def writer(pg_migrated_url: str) -> Iterator[PgConnection]:
    """A writer connection as the daemon opens it, with a table of its own."""
    conn = open_postgres(pg_migrated_url)
    conn.execute("CREATE TABLE pipelined (id INTEGER PRIMARY KEY)")
    yield conn
    conn.close()


def stored(conn: PgConnection) -> list[int]:
    return [int(r[0]) for r in conn.execute("SELECT id FROM pipelined ORDER BY id").fetchall()]


def pipelining(conn: PgConnection) -> bool:
    return conn.raw.pgconn.pipeline_status != pq.PipelineStatus.OFF


def test_a_write_transaction_is_pipelined_until_its_commit(writer: PgConnection) -> None:
    """From BEGIN to COMMIT the connection is in pipeline mode; COMMIT leaves it, with
    every row stored."""
    writer.execute("BEGIN")
    writer.execute("INSERT INTO pipelined (id) VALUES (?)", (1,))
    writer.execute("INSERT INTO pipelined (id) VALUES (?)", (2,))
    during = pipelining(writer)
    writer.execute("COMMIT")
    assert (during, pipelining(writer), stored(writer)) == (True, False, [1, 2])


def test_answers_read_in_the_transaction_are_its_own(writer: PgConnection) -> None:
    """A rowcount or a row read mid-transaction is that statement's, seeing the ones
    before it."""
    writer.execute("BEGIN")
    writer.execute("INSERT INTO pipelined (id) VALUES (?), (?)", (1, 2))
    updated = writer.execute("UPDATE pipelined SET id = id + 10 WHERE id > ?", (0,)).rowcount
    total = writer.execute("SELECT sum(id) FROM pipelined").fetchone()
    writer.execute("COMMIT")
    assert (updated, total, stored(writer)) == (2, (23,), [11, 12])


def test_an_error_unread_fails_the_commit_and_stores_nothing(writer: PgConnection) -> None:
    """A statement that fails, its answer never read, fails the COMMIT; after the
    ROLLBACK nothing of the transaction is stored and the connection works on."""
    writer.execute("INSERT INTO pipelined (id) VALUES (?)", (1,))
    writer.execute("BEGIN")
    writer.execute("INSERT INTO pipelined (id) VALUES (?)", (2,))
    writer.execute("INSERT INTO pipelined (id) VALUES (?)", (1,))  # a duplicate key
    with pytest.raises(psycopg.errors.UniqueViolation):
        writer.execute("COMMIT")
    assert writer.in_transaction
    writer.execute("ROLLBACK")
    assert (writer.in_transaction, stored(writer)) == (False, [1])


def test_a_rollback_after_an_error_read_leaves_the_connection_usable(
    writer: PgConnection,
) -> None:
    """An error raised where an answer is read mid-transaction is followed by a ROLLBACK
    that runs (it is not lost in the aborted pipeline): the next transaction commits."""
    writer.execute("BEGIN")
    writer.execute("INSERT INTO pipelined (id) VALUES (?)", (1,))
    with pytest.raises(psycopg.errors.DivisionByZero):
        writer.execute("SELECT 1 / (id - 1) FROM pipelined").fetchall()
    writer.execute("ROLLBACK")
    writer.execute("BEGIN")
    writer.execute("INSERT INTO pipelined (id) VALUES (?)", (5,))
    writer.execute("COMMIT")
    assert stored(writer) == [5]
