"""Group commit: sends close together share one transaction; each answer is exact."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred, DeferredList

from pigeond.storage import AcceptOutcome, StorageUnavailable, SwarmRepository
from pigeond.storage.database import ThreadedDatabase, open_threaded
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import NOW_MS

reactor: Any = global_reactor


@pytest.fixture
def db(db_path: Path) -> Iterator[ThreadedDatabase]:
    database = open_threaded(db_path, reactor, busy_timeout_ms=300)
    yield database
    database.close()


def hold_the_writer(db: ThreadedDatabase) -> threading.Event:
    """Keep the writer thread busy until the returned event is set: sends asked meanwhile
    queue up, as they do behind a commit under load (asked once the hold runs: an accept
    group would go before a write still queued)."""
    release, running = threading.Event(), threading.Event()

    def wait(repo: SwarmRepository) -> None:
        running.set()
        release.wait(timeout=10)

    db.write(wait)
    assert running.wait(timeout=10)
    return release


async def all_of(answers: list[Deferred[AcceptOutcome]]) -> list[Any]:
    """Each answer's outcome, or its exception."""
    results = await DeferredList(answers, consumeErrors=True)
    return [value if ok else value.value for ok, value in results]


@pytest_twisted.ensureDeferred
async def test_an_idle_send_commits_alone_at_once(db: ThreadedDatabase) -> None:
    """With nothing else queued a send is its own group: no waiting for company."""
    assert await db.accept(Accept(new_message(msg_id="msg_1"), NOW_MS)) is AcceptOutcome.STORED
    assert (db.group_commit.groups, db.group_commit.largest_group) == (1, 1)


@pytest_twisted.ensureDeferred
async def test_sends_queued_together_share_one_commit_in_order(db: ThreadedDatabase) -> None:
    """Ten sends that queue up behind a busy writer are stored by one commit, in order."""
    release = hold_the_writer(db)
    ids = [f"msg_{i}" for i in range(10)]
    answers = [db.accept(Accept(new_message(msg_id=i), NOW_MS)) for i in ids]
    release.set()
    assert await all_of(answers) == [AcceptOutcome.STORED] * 10
    assert (db.group_commit.groups, db.group_commit.largest_group) == (1, 10)
    stored = [await db.read(SwarmRepository.get, i) for i in ids]
    seqs = [m.accept_seq for m in stored if m is not None and m.accept_seq is not None]
    assert len(seqs) == 10 and seqs == sorted(seqs)


@pytest_twisted.ensureDeferred
async def test_a_msg_id_twice_in_one_group_is_answered_as_if_apart(
    db: ThreadedDatabase,
) -> None:
    """Inside one group: the first is stored, the same again is a duplicate, the same id
    with other content a conflict; only the first is on disk."""
    release = hold_the_writer(db)
    first = new_message(msg_id="msg_1", payload="hello")
    answers = [
        db.accept(Accept(first, NOW_MS)),
        db.accept(Accept(first, NOW_MS)),
        db.accept(Accept(new_message(msg_id="msg_1", payload="other"), NOW_MS)),
    ]
    release.set()
    assert await all_of(answers) == [
        AcceptOutcome.STORED, AcceptOutcome.DUPLICATE, AcceptOutcome.CONFLICT,
    ]  # fmt: skip
    assert db.group_commit.largest_group == 3
    stored = await db.read(SwarmRepository.get, "msg_1")
    assert stored is not None and stored.payload == "hello"


@pytest_twisted.ensureDeferred
async def test_a_group_never_pushes_a_target_past_its_cap(db: ThreadedDatabase) -> None:
    """Five sends to one target with room for two, all in one group: two stored, three
    TARGET_FULL, counted in the transaction itself; a retry of a stored one stays a
    duplicate; another target is not held back."""
    await db.accept(Accept(new_message(msg_id="msg_old"), NOW_MS))
    release = hold_the_writer(db)
    capped = [Accept(new_message(msg_id=f"msg_{i}"), NOW_MS, None, 3) for i in range(5)]
    retry = Accept(new_message(msg_id="msg_old"), NOW_MS, None, 3)
    other = Accept(new_message("ses_other", msg_id="msg_other"), NOW_MS, None, 3)
    answers = [db.accept(a) for a in [*capped, retry, other]]
    release.set()
    full = AcceptOutcome.TARGET_FULL
    assert await all_of(answers) == [
        AcceptOutcome.STORED, AcceptOutcome.STORED, full, full, full,
        AcceptOutcome.DUPLICATE, AcceptOutcome.STORED,
    ]  # fmt: skip
    assert db.group_commit.largest_group == 7
    assert await db.read(SwarmRepository.count_queued_for, "ses_target") == 3


@pytest_twisted.ensureDeferred
async def test_a_failed_group_commit_fails_every_send_and_stores_none(
    db: ThreadedDatabase, db_path: Path
) -> None:
    """When the group's transaction cannot be made (a lock held past the busy timeout),
    every send of the group gets StorageUnavailable (a 503), and none is stored."""
    other = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    other.execute("BEGIN IMMEDIATE")
    try:
        release = hold_the_writer(db)
        answers = [db.accept(Accept(new_message(msg_id=f"msg_{i}"), NOW_MS)) for i in range(4)]
        release.set()
        outcomes = await all_of(answers)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert all(isinstance(o, StorageUnavailable) for o in outcomes), outcomes
    assert await db.read(SwarmRepository.count_by_state) == {}
    assert await db.accept(Accept(new_message(msg_id="msg_after"), NOW_MS)) is (
        AcceptOutcome.STORED
    )
