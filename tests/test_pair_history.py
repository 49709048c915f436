"""The pair brakes' reads (pigeond/storage/pair_history.py): the messages between two
sessions after a time, one direction counted, both directions' payloads newest first, on
SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from pigeond.consent import Policy, held_reason
from pigeond.model import Hold
from pigeond.storage import SwarmRepository
from pigeond.storage.brake_holds import ReleaseMode, pair_scope
from pigeond.storage.engines import POSTGRES
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import NOW_MS
from tests.storage_helpers import accept_channel_alone

pytestmark = pytest.mark.both_backends
A, B, C = "ses_a", "ses_b", "ses_c"


HELD = Hold("pair_rate", "too many")


def send(
    repo: SwarmRepository,
    sender: str,
    target: str,
    at: int,
    payload: str = "hi",
    *,
    brake_hold: Hold | None = None,
    consent_hold: str | None = None,
) -> str:
    message = new_message(target, sender=sender, payload=payload)
    repo.accept_many([Accept(message, at, brake_hold=brake_hold, held=consent_hold)])
    return message.msg_id


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
    accept_channel_alone(repo, new_message(channel="team", sender=A), NOW_MS)
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


def test_only_messages_accepted_for_delivery_count(repo: SwarmRepository) -> None:
    """A brake-held message and one a person dropped do not count; a consent hold and a
    released message do."""
    send(repo, A, B, NOW_MS, "held", brake_hold=HELD)
    dropped = send(repo, A, B, NOW_MS, "dropped", brake_hold=HELD)
    repo.drop_brake_hold(dropped, NOW_MS + 1)
    released = send(repo, A, B, NOW_MS, "released", brake_hold=HELD)
    repo.release_brake_hold(released, ReleaseMode.ONCE, 0, NOW_MS + 1)
    send(repo, A, B, NOW_MS, "consent", consent_hold=held_reason(B, Policy.HOLD))
    assert repo.pair_sent_count(A, B, 0, 100) == 2
    assert sorted(repo.pair_payloads(A, B, 0, 100, 100)) == ["consent", "released"]


def test_the_pairs_reset_starts_the_window_over(repo: SwarmRepository) -> None:
    """After the pair's reset (either direction's scope), only later messages count; a
    window that starts after the reset is the window."""
    send(repo, A, B, NOW_MS, "before")
    send(repo, B, A, NOW_MS + 5, "at the reset")
    repo.set_brake_reset(pair_scope(B, A), NOW_MS + 5)
    send(repo, A, B, NOW_MS + 6, "after")
    assert repo.pair_sent_count(A, B, 0, 100) == 1
    assert repo.pair_payloads(B, A, 0, 100, 100) == ["after"]
    assert repo.pair_payloads(A, B, NOW_MS + 6, 100, 100) == []


def test_the_pair_index_exists_on_both_engines(repo: SwarmRepository) -> None:
    """idx_swarm_pair is on (to_session, from_session, created_at), direct messages only."""
    if repo.engine is POSTGRES:
        sql = repo.connection.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'idx_swarm_pair'"
        ).fetchone()[0]
    else:
        sql = repo.connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'idx_swarm_pair'"
        ).fetchone()[0]
    assert "(to_session, from_session, created_at)" in sql
    assert "WHERE" in sql and "to_session IS NOT NULL" in sql
