"""On PostgreSQL the hand-off path's transactions wait for the server once before their
commit: an accept's reads go together, and so do a drain step's."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from pigeond.storage import SwarmRepository
from pigeond.storage.drain_steps import DrainStep
from pigeond.storage.postgres import open_postgres
from pigeond.storage.repository import Accept
from testkit.messages import new_message


class Trips:
    """Counts the times a pipeline is made to send what it queued and wait for answers
    (each one round trip to the server), besides the one at each COMMIT."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        sync = psycopg.Pipeline.sync

        def counted(pipeline: psycopg.Pipeline) -> None:
            self.count += 1
            sync(pipeline)

        monkeypatch.setattr(psycopg.Pipeline, "sync", counted)


@pytest.fixture
def repo(pg_migrated_url: str) -> Iterator[SwarmRepository]:
    repository = SwarmRepository(open_postgres(pg_migrated_url))
    yield repository
    repository.close()


def accept(to: str, msg_id: str) -> Accept:
    """A send with every bound on: a target cap and the queue's bytes."""
    return Accept(new_message(to, msg_id=msg_id), 1_000, queue_cap=100, max_queued_bytes=10**6)


def test_an_accept_asks_its_reads_in_one_round_trip(
    repo: SwarmRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sequence, the msg_id, the target's queue, the names and the queue's bytes:
    one trip, then the commit."""
    trips = Trips(monkeypatch)
    outcomes = repo.accept_many([accept("ses_a", "msg_1")])
    assert (outcomes[0].value, trips.count) == ("stored", 1)


def test_a_drain_step_claims_in_one_round_trip(
    repo: SwarmRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the head and claiming it: the claim's count comes with the commit."""
    repo.accept_many([accept("ses_a", "msg_1")])
    trips = Trips(monkeypatch)
    step = DrainStep("ses_a", 2_000, read_limit=10)
    results = repo.drain_steps([step], lambda _, due: [m.msg_id for m in due])
    assert (results[0].claimed, trips.count) == (["msg_1"], 1)


def test_a_duplicate_in_one_group_still_sees_the_first(repo: SwarmRepository) -> None:
    """Each accept's reads are asked after the inserts before it in its group."""
    outcomes = repo.accept_many([accept("ses_a", "msg_1"), accept("ses_a", "msg_1")])
    assert [o.value for o in outcomes] == ["stored", "duplicate"]
