"""Each session's consent in storage (pigeond/storage/policies.py, migration 12): a held
message is queued with no next_retry_at, never due, still expiring; policy changes apply
to the messages already waiting."""

from __future__ import annotations

import re

import pytest

from pigeond.consent import POLICIES, Policy, held_reason
from pigeond.storage import SwarmRepository
from pigeond.storage.engines import POSTGRES
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import NOW_MS
from tests.sender_proof_support import accept_pending, accept_verified

pytestmark = pytest.mark.both_backends
B, A, FRIEND = "ses_b", "ses_a", "ses_friend"


def held_accept(
    repo: SwarmRepository, sender: str = A, expires_at: int | None = None, verified: bool = False
) -> str:
    """A message to B stored as held, as the send path stores it under B's ``hold``."""
    message = new_message(B, sender=sender)
    held = held_reason(B, Policy.HOLD)
    if verified:
        accept_verified(repo, message, NOW_MS, held)
    else:
        repo.accept_many([Accept(message, NOW_MS, expires_at, held=held)])
    return message.msg_id


def test_the_schema_check_lists_exactly_the_declared_policies(repo: SwarmRepository) -> None:
    """Migration 12's CHECK names the policies pigeond.consent.POLICIES declares."""
    if repo.engine is POSTGRES:
        sql = repo.connection.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'swarm_policies'::regclass AND contype = 'c'"
            " AND pg_get_constraintdef(oid) LIKE '%policy%'"
        ).fetchone()[0]
        values = re.findall(r"'(\w+)'::text", sql)
    else:
        sql = repo.connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'swarm_policies'"
        ).fetchone()[0]
        check = re.search(r"policy IN \(([^)]*)\)", sql)
        assert check is not None
        values = [v.strip(" '") for v in check.group(1).split(",")]
    assert tuple(values) == POLICIES


def test_a_session_without_a_policy_accepts(repo: SwarmRepository) -> None:
    """The default needs no row: accept, nobody listed."""
    policy = repo.policy_of(B)
    assert (policy.policy, policy.allow, repo.policies()) == (Policy.ACCEPT, (), [])


def test_a_held_message_is_never_ready(repo: SwarmRepository) -> None:
    """A held message is in neither ready_targets nor ready_batch."""
    held_accept(repo)
    assert repo.ready_targets(NOW_MS + 1) == []
    assert repo.ready_batch(B, NOW_MS + 1, 10) == []


def test_an_allowed_message_is_not_stuck_behind_held_ones(repo: SwarmRepository) -> None:
    """ready_batch steps over held messages to a due one behind them."""
    held_accept(repo)
    allowed = new_message(B, sender=FRIEND)
    repo.accept(allowed, NOW_MS)
    assert [m.msg_id for m in repo.ready_batch(B, NOW_MS, 10)] == [allowed.msg_id]


def test_a_held_message_still_expires_and_notifies(repo: SwarmRepository) -> None:
    """Held means queued: the expiry sweep ends it and tells its sender."""
    msg_id = held_accept(repo, expires_at=NOW_MS + 1000)
    assert repo.expire_due(NOW_MS + 1000) == [msg_id]
    [notice] = repo.ready_batch(A, NOW_MS + 1000, 10)
    assert notice.reply_to == msg_id


def test_hold_holds_what_already_waits(repo: SwarmRepository) -> None:
    """Switching to hold holds the queued messages, but not an allowed sender's."""
    repo.accept(new_message(B, sender=A), NOW_MS)
    allowed = new_message(B, sender=FRIEND)
    accept_verified(repo, allowed)
    change = repo.set_policy(B, Policy.HOLD, (FRIEND,), NOW_MS, B)
    assert (change.held, change.released) == (1, 0)
    assert [m.msg_id for m in repo.ready_batch(B, NOW_MS, 10)] == [allowed.msg_id]


def test_a_message_in_doubt_is_never_held(repo: SwarmRepository) -> None:
    """A message whose hand-off may have happened is left alone by hold."""
    message = new_message(B)
    repo.accept(message, NOW_MS)
    repo.connection.execute(
        "UPDATE swarm_messages SET handoff_intent_at = ? WHERE msg_id = ?",
        (NOW_MS, message.msg_id),
    )
    assert repo.set_policy(B, Policy.HOLD, (), NOW_MS, B).held == 0


def test_accept_releases_every_held_message_in_order(repo: SwarmRepository) -> None:
    """Switching back to accept makes every held message due at once, in accept order."""
    repo.set_policy(B, Policy.HOLD, (), NOW_MS, B)
    first, second = held_accept(repo), held_accept(repo)
    change = repo.set_policy(B, Policy.ACCEPT, (), NOW_MS + 5, B)
    assert change.released == 2
    assert [m.msg_id for m in repo.ready_batch(B, NOW_MS + 5, 10)] == [first, second]
    assert repo.policies() == []


def test_release_keeps_the_policy(repo: SwarmRepository) -> None:
    """release_held makes the held messages due; the session still holds."""
    repo.set_policy(B, Policy.HOLD, (), NOW_MS, B)
    msg_id = held_accept(repo)
    assert repo.release_held(B, NOW_MS + 1) == 1
    assert [m.msg_id for m in repo.ready_batch(B, NOW_MS + 1, 10)] == [msg_id]
    assert repo.policy_of(B).policy is Policy.HOLD


def test_adding_a_sender_to_the_allow_list_releases_its_messages(repo: SwarmRepository) -> None:
    """Under hold, a sender newly allowed gets its held messages through."""
    repo.set_policy(B, Policy.HOLD, (), NOW_MS, B)
    from_friend, from_a = held_accept(repo, sender=FRIEND, verified=True), held_accept(repo)
    change = repo.set_policy(B, Policy.HOLD, (FRIEND,), NOW_MS + 1, B)
    assert change.released == 1
    assert [m.msg_id for m in repo.ready_batch(B, NOW_MS + 1, 10)] == [from_friend]
    assert repo.held_counts() == {B: 1} and from_a


def test_a_policy_is_stored_with_its_allow_list_and_author(repo: SwarmRepository) -> None:
    """set_policy's row reads back whole."""
    repo.set_policy(B, Policy.REFUSE, (FRIEND, "@reviewer"), NOW_MS, "operator")
    [stored] = repo.policies()
    assert stored.view() == {
        "session": B, "policy": "refuse", "allow": [FRIEND, "@reviewer"], "steer": False,
        "updated_at": NOW_MS, "updated_by": "operator",
    }  # fmt: skip


def test_an_allow_list_or_steering_given_as_none_stays_as_stored(repo: SwarmRepository) -> None:
    """set_policy with no allow-list and no steering changes the policy alone (the row as it
    is in the write's transaction); on a session with no row, they are the defaults."""
    repo.set_policy(B, Policy.HOLD, None, NOW_MS, "session", None)
    assert (repo.policy_of(B).allow, repo.policy_of(B).steer) == ((), False)
    repo.set_policy(B, Policy.ACCEPT, (FRIEND,), NOW_MS, "operator", steer=True)
    change = repo.set_policy(B, Policy.REFUSE, None, NOW_MS + 1, "session", None)
    stored = repo.policy_of(B)
    assert change.policy == stored
    assert (stored.policy, stored.allow, stored.steer) == (Policy.REFUSE, (FRIEND,), True)


def test_hold_spares_what_a_listed_name_sent(repo: SwarmRepository) -> None:
    """Switching to hold with ``@builder`` listed holds the nameless sender's message, not
    the one builder's holder sent."""
    repo.claim_name("builder", FRIEND, NOW_MS)
    repo.accept(new_message(B, sender=A), NOW_MS)
    from_builder = new_message(B, sender=FRIEND)
    accept_verified(repo, from_builder)
    change = repo.set_policy(B, Policy.HOLD, ("@builder",), NOW_MS, B)
    assert (change.held, change.released) == (1, 0)
    assert [m.msg_id for m in repo.ready_batch(B, NOW_MS, 10)] == [from_builder.msg_id]


def test_listing_a_name_releases_what_its_holder_sent(repo: SwarmRepository) -> None:
    """A policy change adding ``@builder`` releases the held messages whose from_name is
    builder, and only those."""
    repo.claim_name("builder", FRIEND, NOW_MS)
    repo.set_policy(B, Policy.HOLD, (), NOW_MS, B)
    from_builder, _ = held_accept(repo, sender=FRIEND, verified=True), held_accept(repo, sender=A)
    change = repo.set_policy(B, Policy.REFUSE, ("@builder",), NOW_MS + 1, B)
    assert (change.held, change.released) == (0, 1)
    assert [m.msg_id for m in repo.ready_batch(B, NOW_MS + 1, 10)] == [from_builder]
    assert repo.held_counts() == {B: 1}


def test_a_name_claimed_after_the_send_releases_nothing(repo: SwarmRepository) -> None:
    """``@builder`` matches the name a message was accepted with, not the one its sender
    claimed later: what waits was judged without it."""
    repo.set_policy(B, Policy.HOLD, (), NOW_MS, B)
    held_accept(repo, sender=FRIEND)
    repo.claim_name("builder", FRIEND, NOW_MS + 1)
    assert repo.set_policy(B, Policy.HOLD, ("@builder",), NOW_MS + 2, B).released == 0
    assert repo.ready_batch(B, NOW_MS + 2, 10) == []


def test_hold_holds_an_unverified_sender_the_allow_list_names(repo: SwarmRepository) -> None:
    """An allow-list admits only a verified sender: one that only claims to be FRIEND is
    held with the rest."""
    repo.accept(new_message(B, sender=FRIEND), NOW_MS)
    change = repo.set_policy(B, Policy.HOLD, (FRIEND,), NOW_MS, B)
    assert (change.held, change.released) == (1, 0)


def test_hold_spares_a_listed_sender_still_being_verified(repo: SwarmRepository) -> None:
    """A listed sender whose proof is pending is not held (it is not due before it settles,
    and settled unverified it is held then)."""
    accept_pending(repo, new_message(B, sender=FRIEND))
    assert repo.set_policy(B, Policy.HOLD, (FRIEND,), NOW_MS, B).held == 0
