"""Bookkeeping written together: one transaction and one commit, all or nothing."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from pigeond.storage import SwarmRepository
from pigeond.storage.base import SharedWriteSpoiled
from pigeond.storage.errors import StorageUnavailable
from pigeond.storage.repository import Accept
from pigeond.storage.write_marks import may_share_commit
from testkit.messages import new_message

pytestmark = pytest.mark.both_backends

AT = 1_000_000
# How the failing write below fails: in the call (SQLite's error, as StorageUnavailable),
# or at the commit, out of the pipeline that held it (PostgreSQL); or, for a call that
# caught its own, as spoiled.
WRITE_FAILED = (StorageUnavailable, psycopg.errors.UndefinedColumn, SharedWriteSpoiled)


def handed_off(repo: SwarmRepository, *msg_ids: str) -> None:
    """Store ``msg_ids`` as handed off to one target, not yet seen in its transcript."""
    repo.accept_many([Accept(new_message("ses_target", msg_id=m), AT) for m in msg_ids])
    for msg_id in msg_ids:
        repo.mark_handed_off(msg_id, AT, AT + 60_000)


def verified(repo: SwarmRepository, msg_id: str) -> bool:
    message = repo.get(msg_id)
    assert message is not None
    return message.verified_at is not None


def failing_write(repo: SwarmRepository, *, caught: bool) -> Callable[[], None]:
    """A call whose write transaction fails on a real statement (a column that does not
    exist); ``caught``: the call catches its own error and returns as if nothing happened."""

    def call() -> None:
        try:
            with repo._write() as conn:
                conn.execute("UPDATE swarm_messages SET no_such_column = 1")
        except Exception:
            if not caught:
                raise

    return call


def test_calls_written_together_each_get_their_own_result(repo: SwarmRepository) -> None:
    """Each call's result comes back in order, and every write is committed."""
    handed_off(repo, "msg_a", "msg_b")
    results = repo.write_together(
        [lambda: repo.mark_verified(["msg_a"], AT), lambda: repo.mark_verified(["msg_b"], AT)]
    )
    assert (results, verified(repo, "msg_a"), verified(repo, "msg_b")) == (
        [["msg_a"], ["msg_b"]],
        True,
        True,
    )


def test_a_failing_call_rolls_the_whole_transaction_back(repo: SwarmRepository) -> None:
    """One call's error undoes the writes of the calls before it in the transaction."""
    handed_off(repo, "msg_a")
    with pytest.raises(WRITE_FAILED):
        repo.write_together(
            [lambda: repo.mark_verified(["msg_a"], AT), failing_write(repo, caught=False)]
        )
    assert not verified(repo, "msg_a")


def test_a_call_that_catches_its_own_error_still_spoils_the_transaction(
    repo: SwarmRepository,
) -> None:
    """A call that swallows its write's error cannot leave the others half-written."""
    handed_off(repo, "msg_a")
    with pytest.raises(WRITE_FAILED):
        repo.write_together(
            [lambda: repo.mark_verified(["msg_a"], AT), failing_write(repo, caught=True)]
        )
    assert not verified(repo, "msg_a")


def test_the_connection_writes_alone_again_after_a_spoiled_transaction(
    repo: SwarmRepository,
) -> None:
    """After a rollback (on PostgreSQL, out of a pipeline that held the error) the next
    write runs as usual."""
    handed_off(repo, "msg_a")
    with pytest.raises(WRITE_FAILED):
        repo.write_together([failing_write(repo, caught=False)])
    assert repo.mark_verified(["msg_a"], AT) == ["msg_a"]


def test_the_hand_off_bookkeeping_may_share_a_commit() -> None:
    """A transcript look's record, verified, answered, turns and routes are marked to share;
    a send or an intent is not."""
    shared: list[Callable[..., object]] = [
        SwarmRepository.record_look,
        SwarmRepository.mark_verified,
        SwarmRepository.mark_answered,
        SwarmRepository.record_turns,
        SwarmRepository.record_routes,
    ]
    alone: list[Callable[..., object]] = [
        SwarmRepository.accept_many,
        SwarmRepository.mark_handoff_intents,
    ]
    assert [may_share_commit(c) for c in shared + alone] == [True] * 5 + [False] * 2
