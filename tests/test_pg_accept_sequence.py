"""Two daemons accepting at once on one PostgreSQL: each group of sends is numbered after
the other's, never with the same accept sequence (a unique index would fail one group)."""

from __future__ import annotations

import pytest

from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.postgres import open_postgres
from pigeond.storage.repository import AcceptOutcome
from testkit.messages import new_message

NOW_MS = 1_790_000_000_000

# How long the second daemon's accept waits for the first's transaction here: a test of
# whether it waits at all, not of how long.
LOCK_WAIT_MS = 300


def test_an_accept_waits_for_another_daemons_group_to_commit(pg_migrated_url: str) -> None:
    """While one daemon's group holds the accept sequence, another's accept cannot take a
    number (it waits: here, past its lock timeout, and stores nothing)."""
    first = SwarmRepository(open_postgres(pg_migrated_url))
    second = SwarmRepository(open_postgres(pg_migrated_url, lock_timeout_ms=LOCK_WAIT_MS))
    with first._write() as conn:
        first._sequence_value(conn, "accept")
        with pytest.raises(StorageError):
            second.accept(new_message("ses_b", msg_id="msg_second"), NOW_MS)
    assert second.get("msg_second") is None


def test_groups_of_two_daemons_get_distinct_numbers(pg_migrated_url: str) -> None:
    """After the first daemon's group commits, the second's is numbered after it."""
    first = SwarmRepository(open_postgres(pg_migrated_url))
    second = SwarmRepository(open_postgres(pg_migrated_url))
    assert first.accept(new_message("ses_a", msg_id="msg_a"), NOW_MS) is AcceptOutcome.STORED
    assert second.accept(new_message("ses_b", msg_id="msg_b"), NOW_MS) is AcceptOutcome.STORED
    seqs = [m.accept_seq for m in (first.get("msg_a"), second.get("msg_b")) if m is not None]
    assert len(set(seqs)) == 2
