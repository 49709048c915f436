"""The queue's bytes are a number the database keeps (``swarm_queue_bytes``, by triggers):
after every write that changes the queue it equals the sum over the queued rows it replaced,
on a real SQLite file and PostgreSQL, and a restart reads it as it was."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from pigeond.model import NO_MODE
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.migrations import MIGRATIONS
from pigeond.storage.postgres import open_postgres
from pigeond.storage.queue_bytes import payload_bytes, queued_bytes, summed_queued_bytes
from pigeond.storage.repository import Accept
from pigeond.storage.schema import migrate
from testkit.messages import new_message

pytestmark = pytest.mark.both_backends

BEFORE_THE_COUNT = 23  # the schema version before swarm_queue_bytes
PAYLOADS = ["hello", "héllo wörld ✓", "x" * 3000, "🕊️ pigeon"]


def kept(repo: SwarmRepository) -> int:
    """The number kept, after checking it is the sum over the queued rows."""
    number = queued_bytes(repo.connection)
    assert number == summed_queued_bytes(repo.connection)
    return number


def accept_all(repo: SwarmRepository, clock: Clock, **fields: object) -> list[str]:
    """One message of each of PAYLOADS stored, in one group commit; their ids."""
    now_ms = int(clock.seconds() * 1000)
    messages = [new_message(payload=p) for p in PAYLOADS]
    repo.accept_many([Accept(m, now_ms, **fields) for m in messages])  # type: ignore[arg-type]
    return [m.msg_id for m in messages]


def test_accepts_add_their_payloads_utf8_bytes(repo: SwarmRepository, clock: Clock) -> None:
    """Accepts of ASCII, accented and emoji payloads add each payload's UTF-8 bytes."""
    assert kept(repo) == 0
    accept_all(repo, clock)
    assert kept(repo) == sum(payload_bytes(p) for p in PAYLOADS)


def test_hand_offs_take_their_messages_out(repo: SwarmRepository, clock: Clock) -> None:
    """A hand-off takes its messages' bytes out; the rest stay counted."""
    ids = accept_all(repo, clock)
    now_ms = int(clock.seconds() * 1000)
    repo.mark_handed_off_many(ids[:2], now_ms, now_ms + 1000)
    assert kept(repo) == sum(payload_bytes(p) for p in PAYLOADS[2:])
    repo.mark_handed_off_groups([((ids[2],), now_ms, now_ms + 1000, NO_MODE)])
    assert kept(repo) == payload_bytes(PAYLOADS[3])


def test_an_intent_changes_nothing(repo: SwarmRepository, clock: Clock) -> None:
    """A message with its hand-off intent is still queued: still counted."""
    ids = accept_all(repo, clock)
    repo.mark_handoff_intents([(ids, int(clock.seconds() * 1000))])
    assert kept(repo) == sum(payload_bytes(p) for p in PAYLOADS)


def test_expiries_take_their_messages_out(repo: SwarmRepository, clock: Clock) -> None:
    """Expired messages leave the count; the notices they queue to their senders join it."""
    now_ms = int(clock.seconds() * 1000)
    accept_all(repo, clock, expires_at=now_ms + 1000)
    assert len(repo.expire_due(now_ms + 2000)) == len(PAYLOADS)
    assert kept(repo) == queued_notices(repo)


def test_cancel_failure_and_requeue_follow_the_state(repo: SwarmRepository, clock: Clock) -> None:
    """Cancelled and failed messages leave the count; a failed one requeued comes back."""
    ids = accept_all(repo, clock)
    now_ms = int(clock.seconds() * 1000)
    repo.cancel(ids[0], now_ms)
    repo.fail_now(ids[1:3], "gone", now_ms)
    assert kept(repo) == payload_bytes(PAYLOADS[3]) + queued_notices(repo)
    repo.requeue(ids[1], now_ms)
    assert kept(repo) == payload_bytes(PAYLOADS[3]) + payload_bytes(PAYLOADS[1]) + queued_notices(
        repo
    )


def queued_notices(repo: SwarmRepository) -> int:
    """The bytes of the notices pigeond queued to senders (ended messages tell them)."""
    rows = repo.list_messages(state="queued", limit=100)
    return sum(payload_bytes(m.payload) for m in rows if m.kind != "chat")


def test_deleting_queued_rows_takes_them_out(repo: SwarmRepository, clock: Clock) -> None:
    """A queued row deleted by hand (an operator's SQL) leaves the count."""
    ids = accept_all(repo, clock)
    with repo._write() as conn:  # a statement no method makes: by hand
        conn.execute("DELETE FROM swarm_messages WHERE msg_id = ?", (ids[2],))
    assert kept(repo) == sum(payload_bytes(p) for p in PAYLOADS) - payload_bytes(PAYLOADS[2])


def test_a_rolled_back_accept_leaves_the_count(repo: SwarmRepository, clock: Clock) -> None:
    """Bytes an accept added are taken back when its transaction is rolled back."""
    accept_all(repo, clock)
    before = kept(repo)
    with pytest.raises(RuntimeError), repo._write() as conn:
        conn.execute("UPDATE swarm_messages SET payload = payload || 'more' WHERE state = 'queued'")
        raise RuntimeError("rolled back")
    assert kept(repo) == before


def test_a_restart_reads_the_count_as_it_was(
    request: pytest.FixtureRequest, backend: str, db_path: Path, clock: Clock
) -> None:
    """Closed and opened again, the database gives the same count, still the sum."""
    url = request.getfixturevalue("pg_migrated_url") if backend == "postgresql" else None

    def opened() -> SwarmRepository:
        return SwarmRepository(open_database(db_path) if url is None else open_postgres(url))

    repo = opened()
    ids = accept_all(repo, clock)
    repo.mark_handed_off_many(ids[:1], int(clock.seconds() * 1000), 0)
    before = kept(repo)
    repo.close()
    repo = opened()
    try:
        assert kept(repo) == before == sum(payload_bytes(p) for p in PAYLOADS[1:])
    finally:
        repo.close()


@pytest.mark.sqlite_only
def test_the_migration_counts_what_was_already_queued(tmp_path: Path, clock: Clock) -> None:
    """A database queued before the count existed gets their sum when it is migrated."""
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    migrate(conn, MIGRATIONS[:BEFORE_THE_COUNT])
    old = SwarmRepository(conn)
    accept_all(old, clock)
    migrate(conn)
    assert kept(old) == sum(payload_bytes(p) for p in PAYLOADS)
    conn.close()
