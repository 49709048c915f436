"""PostgreSQL out of reach, as the storage package answers it: every read and write is
StorageUnavailable (a 503 for a send, a retry later for delivery), nothing is half-stored,
and the same repository works again once PostgreSQL is back (its connection is opened
again at the next use)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pigeond.storage import StorageUnavailable, SwarmRepository
from pigeond.storage.postgres import open_postgres
from pigeond.storage.postgres.connection import PgConnection
from testkit.messages import new_message
from tests.ports import closed_port

NOW = 1_790_000_000_000


@pytest.fixture
def cut_off(pg_migrated_url: str) -> Iterator[tuple[SwarmRepository, PgConnection]]:
    """A repository whose PostgreSQL is out of reach: its session was closed and its URL
    now names a port nobody listens on (the test gives the URL back to end the cut)."""
    conn = open_postgres(pg_migrated_url)
    repo = SwarmRepository(conn)
    repo.accept(new_message("ses_t", msg_id="msg_before"), NOW, NOW + 1)
    conn.raw.close()
    conn.url = f"postgresql://nobody@127.0.0.1:{closed_port()}/none?connect_timeout=2"
    yield repo, conn
    conn.url = pg_migrated_url
    repo.close()


def test_a_send_while_postgresql_is_out_of_reach_is_unavailable_and_not_stored(
    cut_off: tuple[SwarmRepository, PgConnection], pg_migrated_url: str
) -> None:
    """accept raises StorageUnavailable; once PostgreSQL is back nothing of it is there."""
    repo, conn = cut_off
    with pytest.raises(StorageUnavailable):
        repo.accept(new_message("ses_t", msg_id="msg_during"), NOW)
    conn.url = pg_migrated_url
    assert repo.get("msg_during") is None and repo.get("msg_before") is not None


def test_reads_while_postgresql_is_out_of_reach_are_unavailable(
    cut_off: tuple[SwarmRepository, PgConnection],
) -> None:
    """A read (the arbiter's tick, the inbox) is StorageUnavailable, not a driver error."""
    repo, _ = cut_off
    with pytest.raises(StorageUnavailable):
        repo.ready_targets(NOW)


def test_the_expiry_sweep_while_postgresql_is_out_of_reach_is_unavailable(
    cut_off: tuple[SwarmRepository, PgConnection],
) -> None:
    """The sweep's look before it takes the write lock is StorageUnavailable too (the
    sweeper logs that once, not a traceback every tick)."""
    repo, _ = cut_off
    with pytest.raises(StorageUnavailable):
        repo.expire_due(NOW + 10)


def test_the_repository_works_again_once_postgresql_is_back(
    cut_off: tuple[SwarmRepository, PgConnection], pg_migrated_url: str
) -> None:
    """The next call after the cut opens a new session and goes through."""
    repo, conn = cut_off
    with pytest.raises(StorageUnavailable):
        repo.get("msg_before")
    conn.url = pg_migrated_url
    assert repo.expire_due(NOW + 10) == ["msg_before"]
