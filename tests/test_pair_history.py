"""The pair brakes' reads (pigeond/storage/pair_history.py): the messages between two
sessions after a time, one direction counted, both directions' payloads newest first, on
SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from pigeond.storage import SwarmRepository
from tests.fixed_time import NOW_MS
from tests.messages import new_message

pytestmark = pytest.mark.both_backends
A, B, C = "ses_a", "ses_b", "ses_c"


def send(repo: SwarmRepository, sender: str, target: str, at: int, payload: str = "hi") -> None:
    repo.accept(new_message(target, sender=sender, payload=payload), at)


def test_the_count_is_one_direction_after_a_time(repo: SwarmRepository) -> None:
    """Only sender → target messages after since_ms (exclusive) count."""
    send(repo, A, B, NOW_MS - 10)  # at since_ms itself: not after it
    for at in (NOW_MS, NOW_MS + 1):
        send(repo, A, B, at)
    send(repo, B, A, NOW_MS)  # the other direction
    send(repo, A, C, NOW_MS)  # another target
    send(repo, C, B, NOW_MS)  # another sender
    assert repo.pair_sent_count(A, B, NOW_MS - 10, 100) == 2


def test_the_count_stops_at_its_limit(repo: SwarmRepository) -> None:
    """The count goes no further than its limit."""
    for i in range(5):
        send(repo, A, B, NOW_MS + i)
    assert repo.pair_sent_count(A, B, 0, 3) == 3


def test_a_channel_copy_is_a_message_to_its_member(repo: SwarmRepository) -> None:
    """A channel message's copy for B counts as a message from its sender to B; the
    channel's own message has no target and does not."""
    repo.join_channel("team", B, NOW_MS, 32)
    repo.accept(new_message(channel="team", sender=A), NOW_MS)
    assert repo.pair_sent_count(A, B, 0, 100) == 1


def test_the_payloads_are_both_directions_newest_first(repo: SwarmRepository) -> None:
    """pair_payloads merges both directions by time, newest first, after since_ms."""
    send(repo, A, B, NOW_MS, "old")  # not after since_ms
    send(repo, A, B, NOW_MS + 1, "one")
    send(repo, B, A, NOW_MS + 2, "two")
    send(repo, A, B, NOW_MS + 3, "three")
    send(repo, A, C, NOW_MS + 4, "elsewhere")
    assert repo.pair_payloads(A, B, NOW_MS, 10, 100) == ["three", "two", "one"]
    assert repo.pair_payloads(B, A, NOW_MS, 10, 100) == ["three", "two", "one"]


def test_the_payloads_stop_at_their_limit(repo: SwarmRepository) -> None:
    """At most ``limit`` payloads, the newest, whichever direction has more."""
    for i in range(6):
        send(repo, A, B, NOW_MS + i, f"a{i}")
    send(repo, B, A, NOW_MS + 10, "b")
    assert repo.pair_payloads(A, B, 0, 3, 100) == ["b", "a5", "a4"]


def test_the_payloads_are_cut_in_the_query(repo: SwarmRepository) -> None:
    """Each payload comes cut to ``chars`` characters (not bytes: é is one)."""
    send(repo, A, B, NOW_MS, "é" * 50)
    assert repo.pair_payloads(A, B, 0, 10, 7) == ["é" * 7]


def test_the_pair_index_exists_on_both_engines(repo: SwarmRepository) -> None:
    """idx_swarm_pair is on (to_session, from_session, created_at), direct messages only."""
    if repo.postgres:
        sql = repo.connection.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'idx_swarm_pair'"
        ).fetchone()[0]
    else:
        sql = repo.connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'idx_swarm_pair'"
        ).fetchone()[0]
    assert "(to_session, from_session, created_at)" in sql
    assert "WHERE" in sql and "to_session IS NOT NULL" in sql
