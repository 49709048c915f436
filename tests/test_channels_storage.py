"""Channels in storage: membership, the fan-out in the accept's transaction, history,
each member's consent and cap, expiry notices, search and the migration."""

from __future__ import annotations

from pathlib import Path

import pytest

from pigeond.consent import Policy
from pigeond.envelope import opening_tag
from pigeond.model import NOTICE_KIND, SenderClaim, SenderProof, State
from pigeond.storage import SwarmRepository
from pigeond.storage.base import UNVERIFIED_SENDER
from pigeond.storage.channels import JoinOutcome
from pigeond.storage.migrations import MIGRATIONS
from pigeond.storage.repository import Accept, AcceptOutcome
from pigeond.storage.schema import connect, migrate
from testkit.messages import new_message
from tests.sender_proof_support import pending
from tests.storage_helpers import search_index_in_step

pytestmark = pytest.mark.both_backends
A, B, C, D = "ses_a", "ses_b", "ses_c", "ses_d"
NOW = 1_790_000_000_000
TEAM = "team.backend"


def _team(repo: SwarmRepository, *members: str, limit: int = 32) -> None:
    for i, member in enumerate(members):
        assert repo.join_channel(TEAM, member, NOW + i, limit) is JoinOutcome.JOINED


def _send(
    repo: SwarmRepository,
    msg_id: str = "msg_c1",
    sender: str = D,
    queue_cap: int = 0,
    claim: SenderClaim = UNVERIFIED_SENDER,
) -> None:
    message = new_message(channel=TEAM, msg_id=msg_id, sender=sender)
    accept = Accept(message, NOW, NOW + 60_000, queue_cap, sender=claim)
    assert repo.accept_many([accept])[0] is AcceptOutcome.STORED


def _copies(repo: SwarmRepository, msg_id: str = "msg_c1") -> dict[str, str]:
    """member -> state of its copy of the channel message ``msg_id``."""
    return {d.to_session or "": d.state for d in repo.fan_out_of(msg_id).deliveries}


def test_joining_again_is_already(repo: SwarmRepository) -> None:
    """A member joining again is ALREADY; the members are listed in join order."""
    _team(repo, B, A)
    assert repo.join_channel(TEAM, B, NOW + 9, 32) is JoinOutcome.ALREADY
    assert [(m.session, m.joined_at) for m in repo.channel_members(TEAM)] == [
        (B, NOW),
        (A, NOW + 1),
    ]


def test_joining_a_full_channel_is_refused(repo: SwarmRepository) -> None:
    """The member limit is counted in the join's transaction: the next join is FULL."""
    _team(repo, A, B, limit=2)
    assert repo.join_channel(TEAM, C, NOW, 2) is JoinOutcome.FULL
    assert [m.session for m in repo.channel_members(TEAM)] == [A, B]


def test_a_member_leaves(repo: SwarmRepository) -> None:
    """Leaving removes the membership; leaving twice says it was not a member."""
    _team(repo, A, B)
    assert repo.leave_channel(TEAM, A) is True
    assert repo.leave_channel(TEAM, A) is False
    assert [m.session for m in repo.channel_members(TEAM)] == [B]
    assert repo.channels_of(A) == []


def test_channels_are_listed_with_their_member_counts(repo: SwarmRepository) -> None:
    """Each channel with members, by name, with its count and its last message's time."""
    _team(repo, A, B)
    repo.join_channel("ops", C, NOW, 32)
    _send(repo)
    assert [e.view() for e in repo.channels()] == [
        {"channel": "ops", "members": 1, "last_message_at": None},
        {"channel": TEAM, "members": 2, "last_message_at": NOW},
    ]


def test_a_channel_message_is_fanned_out_to_every_member_but_the_sender(
    repo: SwarmRepository,
) -> None:
    """One queued copy per member but the sender, linked to the channel message, which is
    itself 'fanned_out' (never delivered)."""
    _team(repo, A, B, C, D)
    _send(repo, sender=D)
    assert _copies(repo) == {A: "queued", B: "queued", C: "queued"}
    parent = repo.get("msg_c1")
    assert parent is not None and parent.state == State.FANNED_OUT
    assert parent.to_session is None and parent.next_retry_at is None
    for copy in repo.fan_out_of("msg_c1").deliveries:
        assert (copy.channel, copy.channel_msg_id, copy.payload) == (TEAM, "msg_c1", "hello")
        assert copy.expires_at == NOW + 60_000 and copy.next_retry_at == NOW


def test_each_copy_is_due_in_its_member_s_queue(repo: SwarmRepository) -> None:
    """A copy is an ordinary delivery: its member is a ready target with it as its head."""
    _team(repo, A, B)
    _send(repo, sender=C)
    assert sorted(repo.ready_targets(NOW)) == [A, B]
    head = repo.queue_head(A, NOW)
    assert head is not None and head.channel_msg_id == "msg_c1"


def test_a_copy_s_envelope_names_the_channel_and_its_member(repo: SwarmRepository) -> None:
    """The envelope carries channel="…" and to="<member>"."""
    _team(repo, A)
    _send(repo, sender=B)
    [copy] = repo.fan_out_of("msg_c1").deliveries
    tag = opening_tag(copy)
    assert f'channel="{TEAM}" to="{A}" msg_id="{copy.msg_id}"' in tag


def test_a_retried_channel_send_is_not_fanned_out_again(repo: SwarmRepository) -> None:
    """The same msg_id again is a DUPLICATE: the members keep one copy each."""
    _team(repo, A, B)
    _send(repo, sender=C)
    again = repo.accept(new_message(channel=TEAM, msg_id="msg_c1", sender=C), NOW + 5)
    assert again is AcceptOutcome.DUPLICATE
    assert len(repo.fan_out_of("msg_c1").deliveries) == 2


def test_a_late_joiner_gets_no_earlier_message_but_reads_the_history(
    repo: SwarmRepository,
) -> None:
    """Who is a member is read in the accept: a later member has no copy of an earlier
    message, and finds it in the channel's history."""
    _team(repo, A)
    _send(repo, "msg_c1", sender=B)
    repo.join_channel(TEAM, C, NOW + 10, 32)
    _send(repo, "msg_c2", sender=B)
    assert set(_copies(repo, "msg_c1")) == {A}
    assert set(_copies(repo, "msg_c2")) == {A, C}
    page = repo.channel_history(TEAM, 0, 10)
    assert [m.msg_id for m in page.messages] == ["msg_c1", "msg_c2"] and not page.has_more


def test_the_history_pages_after_a_cursor(repo: SwarmRepository) -> None:
    """History pages by accept number, oldest first; has_more while more wait."""
    _team(repo, A)
    for i in range(3):
        _send(repo, f"msg_h{i}", sender=B)
    first = repo.channel_history(TEAM, 0, 2)
    assert [m.msg_id for m in first.messages] == ["msg_h0", "msg_h1"] and first.has_more
    last_seq = first.messages[-1].accept_seq
    assert last_seq is not None
    rest = repo.channel_history(TEAM, last_seq, 2)
    assert [m.msg_id for m in rest.messages] == ["msg_h2"] and not rest.has_more


def test_a_member_who_left_gets_no_copy(repo: SwarmRepository) -> None:
    """After leaving, a session is not fanned out to; its earlier copy stays queued."""
    _team(repo, A, B)
    _send(repo, "msg_c1", sender=C)
    repo.leave_channel(TEAM, A)
    _send(repo, "msg_c2", sender=C)
    assert set(_copies(repo, "msg_c2")) == {B}
    assert _copies(repo, "msg_c1")[A] == "queued"


def test_a_holding_member_s_copy_waits(repo: SwarmRepository) -> None:
    """A member whose policy is hold gets its copy held (never due); the others' go."""
    _team(repo, A, B)
    repo.set_policy(A, Policy.HOLD, (), NOW, "test")
    _send(repo, sender=C)
    held = {d.to_session: d.next_retry_at for d in repo.fan_out_of("msg_c1").deliveries}
    assert held == {A: None, B: NOW}
    assert repo.release_held(A, NOW + 1) == 1


def test_a_refusing_member_is_left_out_and_named(repo: SwarmRepository) -> None:
    """A member whose policy is refuse gets no copy; the channel message says so."""
    _team(repo, A, B)
    repo.set_policy(A, Policy.REFUSE, (), NOW, "test")
    _send(repo, sender=C)
    fan_out = repo.fan_out_of("msg_c1")
    assert {d.to_session for d in fan_out.deliveries} == {B}
    assert [s.view() for s in fan_out.skipped] == [
        {"session": A, "reason": "its inbound policy is refuse"}
    ]


def test_a_refusing_member_s_allow_list_lets_the_sender_through(repo: SwarmRepository) -> None:
    """A refusing member who allows the sender (by id or by @name) gets its copy, while the
    sender is being verified."""
    _team(repo, A, B)
    repo.claim_name("lead", C, NOW)
    repo.set_policy(A, Policy.REFUSE, ("@lead",), NOW, "test")
    repo.set_policy(B, Policy.REFUSE, (C,), NOW, "test")
    _send(repo, sender=C, claim=pending(NOW))
    assert _copies(repo) == {A: "queued", B: "queued"}


def test_a_refusing_member_s_allow_list_skips_an_unverified_sender(
    repo: SwarmRepository,
) -> None:
    """A sender that only claims to be the listed one is skipped by a refusing member."""
    _team(repo, A, B)
    repo.set_policy(A, Policy.REFUSE, (C,), NOW, "test")
    _send(repo, sender=C)
    assert _copies(repo) == {B: "queued"}


def test_copies_settled_unverified_are_held_by_the_members_that_listed_the_sender(
    repo: SwarmRepository,
) -> None:
    """Each copy shares the channel message's proof; settled unverified, a copy the
    member's allow-list let in is held, naming the sender, and the others go on."""
    _team(repo, A, B)
    repo.set_policy(A, Policy.REFUSE, (C,), NOW, "test")
    _send(repo, sender=C, claim=pending(NOW))
    repo.settle_proof("msg_c1", SenderProof.UNVERIFIED, "not found (test)", NOW + 1)
    copies = {d.to_session: d for d in repo.fan_out_of("msg_c1").deliveries}
    assert {d.from_proof for d in copies.values()} == {"unverified"}
    assert copies[A].hold_kind == "consent" and f"sender {C} not verified" in str(
        copies[A].last_error
    )
    assert [m.to_session for m in repo.ready_batch(B, NOW + 1, 10)] == [B]


def test_a_member_at_its_cap_is_left_out(repo: SwarmRepository) -> None:
    """With a queue cap, a member already holding that many queued messages is skipped,
    not the whole channel."""
    _team(repo, A, B)
    repo.accept(new_message(A, msg_id="msg_direct"), NOW)
    _send(repo, sender=C, queue_cap=1)
    fan_out = repo.fan_out_of("msg_c1")
    assert {d.to_session for d in fan_out.deliveries} == {B}
    assert [s.session for s in fan_out.skipped] == [A]


def test_copies_carry_the_names_held_at_accept(repo: SwarmRepository) -> None:
    """from_name is the sender's name, to_name each member's own."""
    _team(repo, A, B)
    repo.claim_name("reviewer", A, NOW)
    repo.claim_name("lead", C, NOW)
    _send(repo, sender=C)
    names = {d.to_session: (d.from_name, d.to_name) for d in repo.fan_out_of("msg_c1").deliveries}
    assert names == {A: ("lead", "reviewer"), B: ("lead", None)}


def test_an_expired_copy_tells_the_sender_which_member_and_channel(
    repo: SwarmRepository,
) -> None:
    """Copies expire like direct messages, and the sender's notice names the member."""
    _team(repo, A)
    _send(repo, sender=B)
    [expired] = repo.expire_due(NOW + 60_000)
    assert expired == repo.fan_out_of("msg_c1").deliveries[0].msg_id
    [notice] = [m for m in repo.list_messages(target=B) if m.kind == NOTICE_KIND]
    assert f"to {A} (a member of channel {TEAM})" in notice.payload
    assert _copies(repo) == {A: "expired"}


def test_a_sender_finds_its_channel_message_once(repo: SwarmRepository) -> None:
    """Search: the sender finds the channel message, not each copy; a member finds its copy."""
    _team(repo, A, B)
    _send(repo, sender=C)
    assert [m.msg_id for m in repo.search("hello", session=C)] == ["msg_c1"]
    [mine] = repo.search("hello", session=A)
    assert (mine.to_session, mine.channel_msg_id) == (A, "msg_c1")
    assert search_index_in_step(repo.connection)


def test_counts_keep_copies_with_deliveries(repo: SwarmRepository) -> None:
    """Copies are counted as deliveries; the channel message only among channel rows."""
    _team(repo, A, B)
    _send(repo, sender=C)
    assert repo.count_by_state() == {"queued": 2}
    assert repo.count_channel_by_state() == {"fanned_out": 1, "queued": 2}


def test_a_fanned_out_channel_message_is_prunable_its_queued_copies_are_not(
    repo: SwarmRepository,
) -> None:
    """History goes by age; a copy still queued is never pruned."""
    _team(repo, A)
    _send(repo, sender=B)
    assert dict(repo.prune_batch(NOW + 1, 100)) == {("channel", "fanned_out"): 1}
    assert repo.get("msg_c1") is None
    [copy] = repo.list_messages(target=A)
    assert copy.state == "queued"


def test_the_migration_ends_old_channel_messages_as_fanned_out(tmp_path: Path) -> None:
    """Channel messages stored before migration 14 (never delivered) become fanned_out."""
    conn = connect(tmp_path / "old.db")
    migrate(conn, MIGRATIONS[:13])
    conn.execute(
        "INSERT INTO swarm_messages (msg_id, from_session, channel, kind, payload, state,"
        " next_retry_at, created_at, updated_at, accept_seq) VALUES"
        " ('msg_old', 'ses_a', 'ops', 'chat', 'legacy', 'queued', 1, 1, 1, 7)"
    )
    assert migrate(conn) == len(MIGRATIONS)
    old = SwarmRepository(conn).get("msg_old")
    assert old is not None and (old.state, old.next_retry_at) == ("fanned_out", None)
