"""One look at a transcript, written in one transaction (pigeond/storage/looks.py), on
SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from pigeond.costs import EndedTurn, TurnUsage
from pigeond.storage import StorageUnavailable, SwarmRepository
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.storage_helpers import seen_message

pytestmark = pytest.mark.both_backends

USAGE = TurnUsage(input=100, output=20, reasoning=5, cache_read=50, cache_write=10, cost=0.25)


def handed_off(repo: SwarmRepository, msg_id: str, at: int) -> None:
    repo.accept_many([Accept(new_message("ses_target", msg_id=msg_id), at)])
    repo.mark_handed_off(msg_id, at, at + 60_000)


def test_a_look_records_seen_turn_and_answer_together(repo: SwarmRepository) -> None:
    """A hand-off seen now gets its turn and its answer in the same write."""
    handed_off(repo, "msg_a", 1)
    look = repo.record_look(
        "ses_target", ["msg_a"], [EndedTurn("u1", ("msg_a",), USAGE)], {"msg_a": "a1"}, 5
    )
    assert (look.verified, look.turns, look.answered) == (
        ["msg_a"], [EndedTurn("u1", ("msg_a",), USAGE)], ["msg_a"],
    )  # fmt: skip
    stored = repo.get("msg_a")
    assert stored is not None
    assert (stored.verified_at, stored.answered_at, stored.answer_message_id) == (5, 5, "a1")
    assert repo.turn_of("msg_a") is not None


def test_a_look_leaves_alone_what_its_conditions_no_longer_allow(
    repo: SwarmRepository,
) -> None:
    """Seen twice is seen once; a queued message is neither seen, linked nor answered."""
    seen_message(repo, "msg_seen", 1)
    repo.accept_many([Accept(new_message("ses_target", msg_id="msg_queued"), 1)])
    look = repo.record_look(
        "ses_target", ["msg_seen", "msg_queued"], [EndedTurn("u1", ("msg_queued",), USAGE)],
        {"msg_seen": "a1", "msg_queued": "a2"}, 5,
    )  # fmt: skip
    assert (look.verified, look.turns, look.answered) == ([], [], ["msg_seen"])
    queued = repo.get("msg_queued")
    assert queued is not None and queued.answered_at is None and queued.verified_at is None


def test_a_look_that_fails_writes_nothing(
    repo: SwarmRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All or nothing: an answer that cannot be written takes the look's seen with it."""

    def full(*args: object) -> list[str]:
        raise StorageUnavailable("database or disk is full")

    handed_off(repo, "msg_a", 1)
    monkeypatch.setattr(SwarmRepository, "_answer", full)
    with pytest.raises(StorageUnavailable):
        repo.record_look("ses_target", ["msg_a"], [], {"msg_a": "a1"}, 5)
    stored = repo.get("msg_a")
    assert stored is not None and stored.verified_at is None
