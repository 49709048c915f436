"""The threaded database: writes on one thread, reads beside them, the reactor never waits."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from pigeond.storage import AcceptOutcome, StorageUnavailable, SwarmRepository
from pigeond.storage.database import ThreadedDatabase, open_threaded
from testkit.messages import new_message
from tests.fixed_time import NOW_MS

reactor: Any = global_reactor


@pytest.fixture
def db(db_path: Path) -> Iterator[ThreadedDatabase]:
    database = open_threaded(db_path, reactor, busy_timeout_ms=300)
    yield database
    database.close()


@pytest.fixture
def other_writer(db: ThreadedDatabase, db_path: Path) -> Iterator[sqlite3.Connection]:
    """Another process's connection (``sqlite3`` in a terminal), holding the write lock."""
    conn = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    conn.execute("BEGIN IMMEDIATE")
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


def settled(d: Deferred[Any]) -> list[Any]:
    """A list that holds ``d``'s result or Failure once it has one."""
    outcome: list[Any] = []
    d.addBoth(outcome.append)
    return outcome


@pytest_twisted.ensureDeferred
async def test_a_write_is_stored_and_read_back(db: ThreadedDatabase) -> None:
    """A write answers once committed; a read right after sees it."""
    message = new_message(msg_id="msg_1")
    assert await db.write(SwarmRepository.accept, message, NOW_MS) is AcceptOutcome.STORED
    stored = await db.read(SwarmRepository.get, "msg_1")
    assert stored is not None and stored.payload == message.payload


@pytest_twisted.ensureDeferred
async def test_reads_and_the_reactor_go_on_while_a_write_waits_for_a_lock(
    db: ThreadedDatabase, other_writer: sqlite3.Connection
) -> None:
    """A write waiting for another process's lock delays neither reads nor the reactor."""
    waiting = settled(db.write(SwarmRepository.accept, new_message(msg_id="msg_1"), NOW_MS))
    await deferLater(reactor, 0.05, lambda: None)  # the reactor runs timers meanwhile
    assert await db.read(SwarmRepository.count_by_state) == {}
    assert waiting == []  # still waiting for the lock
    other_writer.execute("COMMIT")
    await deferLater(reactor, 0.2, lambda: None)
    assert waiting == [AcceptOutcome.STORED]


@pytest_twisted.ensureDeferred
async def test_a_write_fails_unavailable_after_the_busy_timeout(
    db: ThreadedDatabase, other_writer: sqlite3.Connection
) -> None:
    """A lock held past the busy timeout fails the write with StorageUnavailable: a 503."""
    with pytest.raises(StorageUnavailable, match="locked"):
        await db.write(SwarmRepository.accept, new_message(msg_id="msg_1"), NOW_MS)
    other_writer.execute("ROLLBACK")
    assert await db.read(SwarmRepository.get, "msg_1") is None


@pytest_twisted.ensureDeferred
async def test_writes_run_in_the_order_asked(db: ThreadedDatabase) -> None:
    """Writes asked one after the other commit in that order (accept_seq follows it)."""
    ids = [f"msg_{i}" for i in range(40)]
    writes = [db.write(SwarmRepository.accept, new_message(msg_id=i), NOW_MS) for i in ids]
    for write in writes:
        await write
    stored = [await db.read(SwarmRepository.get, i) for i in ids]
    seqs = [m.accept_seq for m in stored if m is not None and m.accept_seq is not None]
    assert seqs == sorted(seqs) and len(seqs) == len(ids)


@pytest_twisted.ensureDeferred
async def test_a_read_connection_cannot_write(db: ThreadedDatabase) -> None:
    """Reader connections are query_only: a write sent to one fails and stores nothing."""
    with pytest.raises(StorageUnavailable):
        await db.read(SwarmRepository.accept, new_message(msg_id="msg_1"), NOW_MS)
    assert await db.read(SwarmRepository.get, "msg_1") is None


@pytest_twisted.ensureDeferred
async def test_close_finishes_the_writes_already_asked(db: ThreadedDatabase, db_path: Path) -> None:
    """close() lets an asked write commit before the connections close."""
    db.write(SwarmRepository.accept, new_message(msg_id="msg_1"), NOW_MS)
    db.close()
    reopened = SwarmRepository(sqlite3.connect(db_path, isolation_level=None))
    try:
        assert reopened.get("msg_1") is not None
    finally:
        reopened.close()


@pytest_twisted.ensureDeferred
async def test_after_close_every_call_fails_unavailable(db: ThreadedDatabase) -> None:
    """Once closed, reads and writes fail with StorageUnavailable, never a closed-db crash."""
    db.close()
    with pytest.raises(StorageUnavailable, match="closed"):
        await db.write(SwarmRepository.accept, new_message(), NOW_MS)
    with pytest.raises(StorageUnavailable, match="closed"):
        await db.read(SwarmRepository.count_by_state)


def test_its_threads_never_keep_the_process_alive(db: ThreadedDatabase) -> None:
    """Every thread the database starts is a daemon thread, so an exit never hangs on it."""
    db.write(SwarmRepository.count_by_state)  # makes sure the writer thread exists
    ours = [t for t in threading.enumerate() if "pigeond-db" in t.name]
    assert ours and all(t.daemon for t in ours)
