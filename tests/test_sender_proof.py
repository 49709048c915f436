"""Who really sent a message (pigeond/delivery/sender_proof.py): a tool's send is looked for
in its sender's own transcript off the accept path, settles within
``sender_proof_timeout_s``, and is never handed off before; on a fake clock, with a fake
reader of transcripts over a real database."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.delivery.sender_proof import SenderProofJob
from pigeond.model import SenderProof, StoredMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from pigeond.tool_calls import plugin_msg_id
from testkit.messages import new_message
from tests.arbiter_harness import TICK_S, make_harness
from tests.fixed_time import now_ms
from tests.sender_proof_support import FakeToolCalls, accept_pending, send_call

pytestmark = pytest.mark.both_backends

A, B = "ses_a", "ses_b"
CLAUDE = "0b8e6f5c-1d2a-4c3b-9e8f-7a6b5c4d3e2f"
TIMEOUT_S = 10.0
STEP_S = 0.05  # the fake clock, stepped as a reactor's time goes


def config() -> Config:
    return Config(db=":memory:", sender_proof_timeout_s=TIMEOUT_S)


def job(repo: SwarmRepository, clock: Clock, calls: FakeToolCalls) -> SenderProofJob:
    return SenderProofJob(InlineDatabase(repo), calls, clock, config())


def tool_send(
    repo: SwarmRepository,
    clock: Clock,
    sender: str = A,
    call_id: str = "call_1",
    payload: str = "hello",
) -> StoredMessage:
    """A send by ``sender``'s swarm_send call, stored pending as the send path stores it."""
    msg_id = plugin_msg_id(sender, call_id) if sender.startswith("ses_") else f"msg_tool_{call_id}"
    message = new_message(B, sender=sender, msg_id=msg_id, payload=payload)
    accept_pending(repo, message, now_ms(clock))
    stored = repo.get(msg_id)
    assert stored is not None
    return stored


def proof(repo: SwarmRepository, msg_id: str) -> tuple[str, str | None]:
    stored = repo.get(msg_id)
    assert stored is not None
    return stored.from_proof, stored.from_proof_note


def test_a_pending_message_is_not_handed_off(repo: SwarmRepository, clock: Clock) -> None:
    """The arbiter hands off nothing of a message whose sender is still being verified, not
    even past its deadline (as after a restart), until it settles."""
    h = make_harness(repo, clock)
    message = tool_send(repo, clock)
    h.arbiter.start()
    clock.advance(TIMEOUT_S + TICK_S)
    h.arbiter.kick(B)
    assert h.opencode.prompts == [] and repo.ready_batch(B, now_ms(clock), 10) == []
    repo.settle_proof(message.msg_id, SenderProof.VERIFIED, "found (test)", now_ms(clock))
    h.arbiter.kick(B)
    assert [p.msg_ids() for p in h.opencode.prompts] == [[message.msg_id]]


def test_a_send_found_in_its_senders_transcript_is_verified(
    repo: SwarmRepository, clock: Clock
) -> None:
    """The swarm_send call whose id gives the msg_id, with the same payload and target,
    verifies the message at the first look, and it is due at once."""
    calls = FakeToolCalls()
    calls.add(A, send_call("call_1", "hello", to=B))
    message = tool_send(repo, clock)
    job(repo, clock, calls).tick()
    assert proof(repo, message.msg_id) == (
        "verified", f"swarm_send call call_1 found in {A}'s transcript",
    )  # fmt: skip
    assert [m.msg_id for m in repo.ready_batch(B, now_ms(clock), 10)] == [message.msg_id]


def test_a_call_with_other_content_does_not_verify(repo: SwarmRepository, clock: Clock) -> None:
    """The same call id with another payload (a forger reusing a real call's msg_id) is no
    proof: the message settles unverified at its deadline."""
    calls = FakeToolCalls()
    calls.add(A, send_call("call_1", "the real text", to=B))
    message = tool_send(repo, clock, payload="a forged text")
    proofs = job(repo, clock, calls)
    proofs.tick()
    assert proof(repo, message.msg_id)[0] == "pending"
    clock.advance(TIMEOUT_S)
    proofs.tick()
    assert proof(repo, message.msg_id) == (
        "unverified", f"no swarm_send call for this message in {A}'s recent transcript",
    )  # fmt: skip


def test_a_pending_message_settles_within_the_timeout(repo: SwarmRepository, clock: Clock) -> None:
    """Not found, it is looked for again, backing off, and settles unverified no later than
    sender_proof_timeout_s after its accept, with no tick of the timer (its own retries)."""
    calls = FakeToolCalls()
    message = tool_send(repo, clock)
    deadline_s = clock.seconds() + TIMEOUT_S
    job(repo, clock, calls).kick()
    while clock.seconds() + STEP_S < deadline_s:
        clock.advance(STEP_S)
    assert proof(repo, message.msg_id)[0] == "pending"
    assert 3 <= len(calls.reads) <= 20  # backing off: a few reads, not one per step
    clock.advance(deadline_s - clock.seconds())
    assert proof(repo, message.msg_id)[0] == "unverified"
    assert [m.msg_id for m in repo.ready_batch(B, now_ms(clock), 10)] == [message.msg_id]


def test_an_unreadable_transcript_is_tried_again_then_unverified(
    repo: SwarmRepository, clock: Clock
) -> None:
    """While the sender's transcript cannot be read, the message is tried again; at the
    deadline it goes on unverified, saying why, and nothing is lost."""
    calls = FakeToolCalls()
    calls.unreadable.add(A)
    message = tool_send(repo, clock)
    proofs = job(repo, clock, calls)
    proofs.tick()
    clock.advance(1.0)
    proofs.tick()
    assert proof(repo, message.msg_id)[0] == "pending" and len(calls.reads) >= 2
    clock.advance(TIMEOUT_S)
    proofs.tick()
    state, note = proof(repo, message.msg_id)
    assert state == "unverified" and note is not None
    assert note.startswith(f"{A}'s transcript could not be read within 10 s")
    assert [m.msg_id for m in repo.ready_batch(B, now_ms(clock), 10)] == [message.msg_id]


def test_a_transcript_readable_again_in_time_verifies(repo: SwarmRepository, clock: Clock) -> None:
    """An outage of the transcript shorter than the timeout loses nothing: verified."""
    calls = FakeToolCalls()
    calls.unreadable.add(A)
    calls.add(A, send_call("call_1", "hello", to=B))
    message = tool_send(repo, clock)
    proofs = job(repo, clock, calls)
    proofs.tick()
    calls.unreadable.clear()
    clock.advance(2.0)
    proofs.tick()
    assert proof(repo, message.msg_id)[0] == "verified"


def test_a_sender_without_a_transcript_is_unverified_at_once(
    repo: SwarmRepository, clock: Clock
) -> None:
    """A reader with no transcript of the sender settles it at the first look."""
    calls = FakeToolCalls()
    calls.unknown.add(A)
    message = tool_send(repo, clock)
    job(repo, clock, calls).tick()
    assert proof(repo, message.msg_id) == (
        "unverified", f"{A} has no transcript pigeond can read",
    )  # fmt: skip


def test_a_restart_resumes_pending_messages(repo: SwarmRepository, clock: Clock) -> None:
    """A new job (a restarted daemon) finds what was pending in the database and settles
    it: the call found verifies it, past the deadline one not found goes unverified."""
    calls = FakeToolCalls()
    found = tool_send(repo, clock, call_id="call_1")
    lost = tool_send(repo, clock, call_id="call_2", payload="other")
    dying = Clock()  # the first daemon looked once, then died: its timers never fire
    dying.advance(clock.seconds())
    job(repo, dying, FakeToolCalls()).tick()
    calls.add(A, send_call("call_1", "hello", to=B))
    clock.advance(TIMEOUT_S)
    job(repo, clock, calls).tick()
    assert proof(repo, found.msg_id)[0] == "verified"
    assert proof(repo, lost.msg_id)[0] == "unverified"
    assert repo.pending_proofs(10) == []


def test_a_claude_tool_use_verifies_at_most_one_message(
    repo: SwarmRepository, clock: Clock
) -> None:
    """Two messages with the same content claim one Claude Code tool_use: the first is
    verified by it, the replay finds it used and settles unverified."""
    calls = FakeToolCalls()
    calls.add(CLAUDE, send_call("toolu_1", "hello", to=B))
    first = tool_send(repo, clock, CLAUDE, "one")
    replay = tool_send(repo, clock, CLAUDE, "two")
    proofs = job(repo, clock, calls)
    proofs.tick()
    clock.advance(TIMEOUT_S)
    proofs.tick()
    assert proof(repo, first.msg_id)[0] == "verified"
    assert proof(repo, replay.msg_id)[0] == "unverified"
    stored = repo.get(first.msg_id)
    assert stored is not None and stored.from_proof_call == "toolu_1"


def test_two_claude_tool_uses_verify_two_messages(repo: SwarmRepository, clock: Clock) -> None:
    """Two calls with the same content verify the two messages they made, one each."""
    calls = FakeToolCalls()
    calls.add(CLAUDE, send_call("toolu_1", "hello", to=B))
    calls.add(CLAUDE, send_call("toolu_2", "hello", to=B))
    sent = [tool_send(repo, clock, CLAUDE, n) for n in ("one", "two")]
    job(repo, clock, calls).tick()
    assert {repo.get(m.msg_id).from_proof_call for m in sent} == {"toolu_1", "toolu_2"}  # type: ignore[union-attr]


def test_the_settled_target_is_kicked(repo: SwarmRepository, clock: Clock) -> None:
    """Settling tells the arbiter the target whose queue it made due."""
    calls, kicked = FakeToolCalls(), list[str]()
    calls.add(A, send_call("call_1", "hello", to=B))
    tool_send(repo, clock)
    SenderProofJob(InlineDatabase(repo), calls, clock, config(), on_settled=kicked.append).tick()
    assert kicked == [B]


def test_a_sender_another_daemons_opencode_has_is_left_to_it(
    repo: SwarmRepository, clock: Clock
) -> None:
    """On a shared database, a daemon whose opencode lacks the sender reads nothing and
    settles it only at its deadline (the owner verifies it first)."""
    calls = FakeToolCalls()
    calls.add(A, send_call("call_1", "hello", to=B))
    message = tool_send(repo, clock)

    async def not_mine(session: str) -> bool:
        return False

    elsewhere = SenderProofJob(InlineDatabase(repo), calls, clock, config(), mine=not_mine)
    elsewhere.tick()
    assert calls.reads == [] and proof(repo, message.msg_id)[0] == "pending"
    clock.advance(TIMEOUT_S)
    elsewhere.tick()
    state, note = proof(repo, message.msg_id)
    assert state == "unverified" and "this daemon's opencode does not have it" in str(note)
