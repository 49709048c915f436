"""Messages stored with a sender proof, as the send path and the sender-proof job store
them (pigeond/api/sender_claims.py, pigeond/storage/sender_proofs.py)."""

from __future__ import annotations

from collections.abc import Sequence

from pigeond.model import NewMessage, SenderClaim, SenderProof
from pigeond.storage import SwarmRepository
from pigeond.storage.repository import Accept
from pigeond.tool_calls import ToolCall, TranscriptUnreadable, plugin_msg_id
from tests.fixed_time import NOW_MS

TIMEOUT_MS = 10_000


def pending(now_ms: int = NOW_MS, timeout_ms: int = TIMEOUT_MS) -> SenderClaim:
    """A tool's send, still to be found in its sender's transcript."""
    return SenderClaim(SenderProof.PENDING, None, now_ms + timeout_ms)


def accept_pending(
    repo: SwarmRepository, message: NewMessage, now_ms: int = NOW_MS, held: str | None = None
) -> None:
    repo.accept_many([Accept(message, now_ms, None, held=held, sender=pending(now_ms))])


def accept_verified(
    repo: SwarmRepository, message: NewMessage, now_ms: int = NOW_MS, held: str | None = None
) -> None:
    """Stored pending, then settled verified at ``now_ms``: due at once."""
    accept_pending(repo, message, now_ms, held)
    settled = repo.settle_proof(message.msg_id, SenderProof.VERIFIED, "found (test)", now_ms)
    assert settled.written


class FakeToolCalls:
    """A :class:`~pigeond.tool_calls.ToolCallReader` over transcripts the test writes:
    each member's calls, the members whose transcript cannot be read now, and the members
    it has no transcript of (None)."""

    def __init__(self) -> None:
        self.calls: dict[str, list[ToolCall]] = {}
        self.unreadable: set[str] = set()
        self.unknown: set[str] = set()
        self.reads: list[str] = []

    async def recent_calls(self, member: str) -> Sequence[ToolCall] | None:
        self.reads.append(member)
        if member in self.unreadable:
            raise TranscriptUnreadable(f"{member}'s transcript: opencode did not answer")
        if member in self.unknown:
            return None
        return list(self.calls.get(member, ()))

    def add(self, member: str, call: ToolCall) -> None:
        self.calls.setdefault(member, []).append(call)


def send_call(
    call_id: str, payload: str, to: str | None = None, channel: str | None = None
) -> ToolCall:
    """A ``swarm_send`` call as a transcript holds it (running: its result not yet in)."""
    given = {"to": to, "channel": channel}
    tool_input = {"payload": payload} | {k: v for k, v in given.items() if v is not None}
    return ToolCall(call_id, "swarm_send", tool_input, False)


def plugin_send(
    calls: FakeToolCalls, sender: str, to: str, payload: str, call_id: str = "call_1"
) -> dict[str, object]:
    """The body the opencode plugin posts for a ``swarm_send`` call of ``sender``, with the
    call written in ``sender``'s transcript."""
    calls.add(sender, send_call(call_id, payload, to=to))
    return {"from": sender, "to": to, "payload": payload, "msg_id": plugin_msg_id(sender, call_id)}
