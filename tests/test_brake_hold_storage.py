"""Brake holds in storage (pigeond/storage/brake_holds.py, migration 18): held for a person,
never due, never expiring, out of the queue cap, kept apart from consent holds; released
(reset, raise, once) or dropped with a notice to the sender."""

from __future__ import annotations

from pathlib import Path

import pytest

from pigeond.consent import Policy, held_reason
from pigeond.model import NOTICE_KIND, Hold, State
from pigeond.storage import AcceptOutcome, SwarmRepository, connect, migrate
from pigeond.storage.brake_holds import (
    DROPPED_BY_A_PERSON,
    HoldOutcome,
    ReleaseMode,
    budget_scope,
    pair_scope,
)
from pigeond.storage.migrations import MIGRATIONS
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import NOW_MS

pytestmark = pytest.mark.both_backends
A, B = "ses_a", "ses_b"
THREAD = "thr_test"
TTL_MS = 60_000
# the schema version before migration 18 (brakes): the last one, until another is appended
BEFORE_BRAKES = 17
HOPS = Hold("hops", "thread thr_test reached 12 hops without a person")


def send(
    repo: SwarmRepository, *, hold: Hold | None = None, at: int = NOW_MS, sender: str = A
) -> str:
    """Accept a message from ``sender`` to B in THREAD, held by ``hold`` when given."""
    message = new_message(B, sender=sender)
    repo.accept_many([Accept(message, at, at + TTL_MS, thread_id=THREAD, brake_hold=hold)])
    return message.msg_id


def stored(repo: SwarmRepository, msg_id: str) -> tuple[str, str | None, int | None]:
    message = repo.get(msg_id)
    assert message is not None
    return message.state, message.hold_kind, message.next_retry_at


def test_a_brake_held_message_is_listed_with_its_reason(repo: SwarmRepository) -> None:
    """held_messages gives the held message, its thread, brake and reason."""
    send(repo)
    msg_id = send(repo, hold=HOPS)
    [held] = repo.held_messages()
    assert (held.msg_id, held.from_session, held.to_session, held.thread_id) == (
        msg_id, A, B, THREAD,
    )  # fmt: skip
    assert (held.brake, held.reason, held.preview) == (HOPS.brake, HOPS.reason, "hello")
    assert repo.held_messages(thread_id="thr_other") == []


def test_a_brake_held_message_is_never_ready(repo: SwarmRepository) -> None:
    """Held for a person: in neither ready_targets nor ready_batch."""
    send(repo, hold=HOPS)
    assert repo.ready_targets(NOW_MS + 1) == []
    assert repo.ready_batch(B, NOW_MS + 1, 10) == []


def test_a_brake_held_message_never_expires(repo: SwarmRepository) -> None:
    """Past its time to live it stays held, and its sender hears nothing."""
    msg_id = send(repo, hold=HOPS)
    assert repo.expire_due(NOW_MS + 10 * TTL_MS) == []
    assert stored(repo, msg_id) == (State.QUEUED, "brake", None)
    assert repo.ready_batch(A, NOW_MS + 10 * TTL_MS, 10) == []


def test_brake_held_messages_are_out_of_the_queue_cap(repo: SwarmRepository) -> None:
    """A target's queue cap counts what waits to be delivered, not what a person holds."""
    send(repo, hold=HOPS)
    send(repo, hold=HOPS)
    assert repo.count_queued_for(B) == 0
    capped = Accept(new_message(B, sender=A), NOW_MS, None, queue_cap=1, thread_id=THREAD)
    assert repo.accept_many([capped]) == [AcceptOutcome.STORED]
    assert repo.count_queued_for(B) == 1


def test_release_delivers_with_its_whole_ttl_again(repo: SwarmRepository) -> None:
    """Released later, it is due now, unheld, and expires a full ttl after the release."""
    msg_id = send(repo, hold=HOPS)
    later = NOW_MS + 5 * TTL_MS
    release = repo.release_brake_hold(msg_id, ReleaseMode.ONCE, 0, later)
    assert (release.outcome, release.target) == (HoldOutcome.DONE, B)
    assert stored(repo, msg_id) == (State.QUEUED, None, later)
    message = repo.get(msg_id)
    assert message is not None and message.expires_at == later + TTL_MS
    assert message.hold_brake == "hops"  # kept as history
    assert [m.msg_id for m in repo.ready_batch(B, later, 10)] == [msg_id]


def test_release_keeps_the_old_order(repo: SwarmRepository) -> None:
    """A released message goes before a message accepted after it."""
    held = send(repo, hold=HOPS)
    later = send(repo, at=NOW_MS + 1)
    repo.release_brake_hold(held, ReleaseMode.ONCE, 0, NOW_MS + 2)
    assert [m.msg_id for m in repo.ready_batch(B, NOW_MS + 2, 10)] == [held, later]


def test_release_reset_starts_the_hops_over(repo: SwarmRepository) -> None:
    """reset: the thread's hops are 0 again from the release."""
    send(repo)
    send(repo)
    msg_id = send(repo, hold=HOPS)
    repo.release_brake_hold(msg_id, ReleaseMode.RESET, 0, NOW_MS + 9)
    thread = repo.thread(THREAD)
    assert thread is not None and (thread.hops, thread.reset_at) == (0, NOW_MS + 9)


def test_release_once_keeps_the_hops(repo: SwarmRepository) -> None:
    """once: the thread's counter and limit stay as they were."""
    send(repo)
    msg_id = send(repo, hold=HOPS)
    repo.release_brake_hold(msg_id, ReleaseMode.ONCE, 0, NOW_MS + 9)
    thread = repo.thread(THREAD)
    assert thread is not None and (thread.hops, thread.hop_limit, thread.held) == (1, None, 0)


def test_release_raise_gives_the_thread_more_hops(repo: SwarmRepository) -> None:
    """raise N: the thread's hop limit becomes its hops plus N (its own limit, if higher)."""
    for _ in range(3):
        send(repo)
    first = send(repo, hold=HOPS)
    repo.release_brake_hold(first, ReleaseMode.RAISE, 5, NOW_MS + 1)
    thread = repo.thread(THREAD)
    assert thread is not None and (thread.hops, thread.hop_limit) == (3, 8)
    second = send(repo, hold=HOPS)
    repo.release_brake_hold(second, ReleaseMode.RAISE, 2, NOW_MS + 2)
    thread = repo.thread(THREAD)
    assert thread is not None and thread.hop_limit == 10


def test_raising_a_brake_without_a_limit_is_refused(repo: SwarmRepository) -> None:
    """A pair-rate hold has no per-thread limit: raise is NOT_RAISABLE, the hold stays."""
    msg_id = send(repo, hold=Hold("pair_rate", "too fast"))
    release = repo.release_brake_hold(msg_id, ReleaseMode.RAISE, 5, NOW_MS + 1)
    assert release.outcome is HoldOutcome.NOT_RAISABLE
    assert stored(repo, msg_id) == (State.QUEUED, "brake", None)


def test_resetting_a_pair_brake_records_the_pairs_reset(repo: SwarmRepository) -> None:
    """reset of a pair brake: the pair's scope (either direction) starts over at the release."""
    msg_id = send(repo, hold=Hold("repeat", "same again"))
    assert repo.brake_reset_at(pair_scope(B, A)) is None
    repo.release_brake_hold(msg_id, ReleaseMode.RESET, 0, NOW_MS + 7)
    assert repo.brake_reset_at(pair_scope(B, A)) == NOW_MS + 7
    assert pair_scope(A, B) == pair_scope(B, A) == "pair:ses_a:ses_b"


def test_resetting_a_budget_records_the_threads_reset(repo: SwarmRepository) -> None:
    """reset of the budget brake: the thread's budget scope starts over at the release."""
    msg_id = send(repo, hold=Hold("budget", "over budget"))
    repo.release_brake_hold(msg_id, ReleaseMode.RESET, 0, NOW_MS + 7)
    assert repo.brake_reset_at(budget_scope(THREAD)) == NOW_MS + 7


def test_a_reset_can_be_set_and_moved(repo: SwarmRepository) -> None:
    """set_brake_reset records a scope's reset, and a later one replaces it."""
    repo.set_brake_reset("pair:ses_a:ses_b", NOW_MS)
    repo.set_brake_reset("pair:ses_a:ses_b", NOW_MS + 1)
    assert repo.brake_reset_at("pair:ses_a:ses_b") == NOW_MS + 1


def test_drop_cancels_and_tells_the_sender(repo: SwarmRepository) -> None:
    """drop: cancelled, "dropped by a person", and the sender's failure notice is queued."""
    msg_id = send(repo, hold=HOPS)
    assert repo.drop_brake_hold(msg_id, NOW_MS + 3) is HoldOutcome.DONE
    message = repo.get(msg_id)
    assert message is not None
    assert (message.state, message.last_error, message.hold_kind) == (
        State.CANCELLED, DROPPED_BY_A_PERSON, None,
    )  # fmt: skip
    [notice] = repo.ready_batch(A, NOW_MS + 3, 10)
    assert (notice.kind, notice.reply_to, notice.thread_id) == (NOTICE_KIND, msg_id, THREAD)
    assert DROPPED_BY_A_PERSON in notice.payload
    assert repo.held_messages() == []


def test_a_decision_is_taken_once(repo: SwarmRepository) -> None:
    """Released or dropped, a message is no longer held: the second decision is NOT_HELD."""
    released, dropped = send(repo, hold=HOPS), send(repo, hold=HOPS)
    repo.release_brake_hold(released, ReleaseMode.ONCE, 0, NOW_MS + 1)
    repo.drop_brake_hold(dropped, NOW_MS + 1)
    for msg_id in (released, dropped):
        assert repo.drop_brake_hold(msg_id, NOW_MS + 2) is HoldOutcome.NOT_HELD
        outcome = repo.release_brake_hold(msg_id, ReleaseMode.ONCE, 0, NOW_MS + 2).outcome
        assert outcome is HoldOutcome.NOT_HELD
    assert repo.drop_brake_hold("msg_unknown", NOW_MS) is HoldOutcome.UNKNOWN
    unknown = repo.release_brake_hold("msg_unknown", ReleaseMode.ONCE, 0, NOW_MS).outcome
    assert unknown is HoldOutcome.UNKNOWN


def test_a_policy_change_never_releases_a_brake_hold(repo: SwarmRepository) -> None:
    """Consent's release and accept policy leave a brake-held message held."""
    msg_id = send(repo, hold=HOPS)
    repo.set_policy(B, Policy.HOLD, (), NOW_MS, None)
    repo.set_policy(B, Policy.ACCEPT, (), NOW_MS + 1, None)
    assert repo.release_held(B, NOW_MS + 2) == 0
    assert stored(repo, msg_id) == (State.QUEUED, "brake", None)
    assert repo.held_counts() == {}


def test_a_brake_release_never_releases_a_consent_hold(repo: SwarmRepository) -> None:
    """A consent-held message is not the brakes': release and drop are NOT_HELD for it."""
    message = new_message(B, sender=A)
    repo.accept_many([Accept(message, NOW_MS, None, held=held_reason(B, Policy.HOLD))])
    assert stored(repo, message.msg_id) == (State.QUEUED, "consent", None)
    release = repo.release_brake_hold(message.msg_id, ReleaseMode.RESET, 0, NOW_MS)
    assert release.outcome is HoldOutcome.NOT_HELD
    assert repo.drop_brake_hold(message.msg_id, NOW_MS) is HoldOutcome.NOT_HELD
    assert repo.held_messages() == []


def test_a_released_message_meets_its_targets_consent(repo: SwarmRepository) -> None:
    """Released while its target holds its sender, it becomes held by consent."""
    msg_id = send(repo, hold=HOPS)
    repo.set_policy(B, Policy.HOLD, (), NOW_MS, None)
    repo.release_brake_hold(msg_id, ReleaseMode.ONCE, 0, NOW_MS + 1)
    assert stored(repo, msg_id) == (State.QUEUED, "consent", None)
    assert repo.held_counts() == {B: 1}


def test_a_brake_on_a_channel_message_holds_every_copy(repo: SwarmRepository) -> None:
    """The copies of a held channel message are each held for a person."""
    repo.join_channel("team", B, NOW_MS, 10)
    repo.join_channel("team", "ses_c", NOW_MS, 10)
    message = new_message(None, channel="team", sender=A)
    repo.accept_many([Accept(message, NOW_MS, None, thread_id=THREAD, brake_hold=HOPS)])
    held = repo.held_messages()
    assert sorted(h.to_session or "" for h in held) == [B, "ses_c"]
    assert {h.channel for h in held} == {"team"}


@pytest.mark.sqlite_only("an old file upgraded in place")
def test_the_migration_marks_old_consent_holds(tmp_path: Path) -> None:
    """A message held by consent before migration 18 is a consent hold after it."""
    conn = connect(tmp_path / "old.db")
    migrate(conn, MIGRATIONS[:BEFORE_BRAKES])
    conn.execute(
        "INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, payload, state,"
        " next_retry_at, created_at, updated_at, accept_seq) VALUES"
        " ('msg_held', 'ses_a', 'ses_b', 'chat', 'wait', 'queued', NULL, 1, 1, 7),"
        " ('msg_due', 'ses_a', 'ses_b', 'chat', 'go', 'queued', 1, 1, 1, 8)"
    )
    assert migrate(conn) == len(MIGRATIONS)
    repo = SwarmRepository(conn)
    assert stored(repo, "msg_held") == (State.QUEUED, "consent", None)
    assert stored(repo, "msg_due") == (State.QUEUED, None, 1)
    assert repo.held_counts() == {} and repo.held_messages() == []


def test_a_brake_held_message_is_never_pruned(repo: SwarmRepository) -> None:
    """However old, a message a person has not decided on stays."""
    msg_id = send(repo, hold=HOPS)
    repo.prune_batch(NOW_MS + 365 * 24 * 3600 * 1000, 100)
    assert stored(repo, msg_id) == (State.QUEUED, "brake", None)
