"""The message vocabulary shared by the routes, storage, arbiter and tools."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

KINDS: Final = (
    "chat",
    "task.assign",
    "status.update",
    "clarification.request",
    "clarification.reply",
    "artifact.handoff",
)
PRIORITIES: Final = ("urgent", "normal", "low")
# The one priority a sender may ask to steer with (``steer``: see NewMessage).
STEER_PRIORITY: Final = "urgent"
DEFAULT_KIND: Final = "chat"
DEFAULT_PRIORITY: Final = "normal"

# -- members and their runtimes -------------------------------------------------------
# A member's id says which agent runtime it lives in, and so how a batch reaches it: one
# declaration per runtime, in the order a session id is matched against them.
OPENCODE_SESSION: Final = r"ses_[A-Za-z0-9_-]{1,128}"
# Claude Code's session id exactly as it gives it (``CLAUDE_CODE_SESSION_ID``): a UUID.
CLAUDE_SESSION: Final = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# A member whose client names no session (Codex): ``pigeon-mcp --as @reviewer`` is
# ``mcp_reviewer``; the part after ``mcp_`` is a name (NAME_RE).
MCP_MEMBER_PREFIX: Final = "mcp_"
MCP_MEMBER: Final = MCP_MEMBER_PREFIX + r"[a-z0-9][a-z0-9_.-]{0,63}"


class Runtime(StrEnum):
    """How a member takes a batch (see docs/agents-other.md)."""

    OPENCODE = "opencode"  # pushed with prompt_async, one turn at a time
    CLAUDE = "claude"  # at its turn end by the Stop hook, and pushed on its channel when idle
    MCP = "mcp"  # pull only: handed off when its own swarm_read asks


RUNTIME_IDS: Final = {
    Runtime.OPENCODE: re.compile(f"^{OPENCODE_SESSION}$"),
    Runtime.CLAUDE: re.compile(f"^{CLAUDE_SESSION}$"),
    Runtime.MCP: re.compile(f"^{MCP_MEMBER}$"),
}
SESSION_ID_RE: Final = re.compile(f"^(?:{OPENCODE_SESSION}|{CLAUDE_SESSION}|{MCP_MEMBER})$")


def runtime_of(session: str) -> Runtime:
    """The runtime a member id belongs to; ValueError for an id of none."""
    runtime = _runtime_of(session)
    if runtime is None:
        raise ValueError(f"{session!r} is not a member id")
    return runtime


# Asked several times for every message handed off (the drain, the verifier, the
# runtimes), of the same few ids: each answer is three regular expressions at most.
@functools.lru_cache(maxsize=4096)
def _runtime_of(session: str) -> Runtime | None:
    for runtime, pattern in RUNTIME_IDS.items():
        if pattern.fullmatch(session):
            return runtime
    return None


SENDER_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
MSG_ID_RE: Final = re.compile(r"^msg_[A-Za-z0-9_-]{1,128}$")
CHANNEL_RE: Final = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
# A name a session claims (``reviewer``, ``builder-2``): lower case, so ``Reviewer`` and
# ``reviewer`` are never two holders; no ``@`` (the send's marker) and nothing a shell,
# an envelope attribute or a URL path would have to escape.
NAME_RE: Final = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
# ``to: "@reviewer"``: a send addressed to whoever holds the name when it is accepted.
NAME_MARK: Final = "@"


class SenderProof(StrEnum):
    """What pigeond knows of who sent a message (``from_proof``; the envelope's
    ``from_verified``).  ``from`` is what a request claims; a send made by a session's own
    pigeond tool is found in that session's own transcript (pigeond/tool_calls.py)."""

    PENDING = "pending"  # not settled yet: looked for off the accept path, never handed off
    VERIFIED = "verified"  # the call that made it is in the claimed sender's transcript
    PERSON = "person"  # sent from a person's shell (pigeon-send at a terminal, no agent)
    UNVERIFIED = "unverified"  # nothing shows the claimed sender made it


# The proofs settled: what the envelope and the views show (a message is never handed
# off while its proof is pending).
SETTLED_PROOFS: Final = (SenderProof.VERIFIED, SenderProof.PERSON, SenderProof.UNVERIFIED)
# The msg_id a pigeond tool gives a send: the opencode plugin's (plugin_msg_id), pigeon-mcp's
# (``msg_tool_`` and a random hex).  Only such a send can be found in a transcript.
TOOL_MSG_ID_PREFIX: Final = "msg_tool_"
# A send's ``via``: sent from a person's shell (pigeon-send at a terminal, outside an agent)
VIA_TERMINAL: Final = "terminal"


@dataclass(frozen=True, slots=True)
class SenderClaim:
    """What the accept knew of a send's sender: its proof so far, why, and, while it is
    pending, when it must be settled by (the message is not due before)."""

    proof: SenderProof = SenderProof.UNVERIFIED
    note: str | None = None
    settle_by: int | None = None

    @property
    def may_be_allowed(self) -> bool:
        """Whether an allow-list may admit it: verified, or pending (never handed off before
        it settles; settled unverified, its target's consent judges it again)."""
        return self.proof in (SenderProof.VERIFIED, SenderProof.PENDING)


class State(StrEnum):
    QUEUED = "queued"
    HANDED_OFF = "handed_off"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    # a delivery.failed notice that could not be delivered either: nothing to fix
    DROPPED = "dropped"
    # a channel message: copied, when accepted, into one delivery per member (each with
    # its own state); never delivered itself, kept as the channel's history
    FANNED_OUT = "fanned_out"


# The kinds of hold a queued message can be under (``StoredMessage.hold_kind``).
HOLD_CONSENT: Final = "consent"
HOLD_BRAKE: Final = "brake"


@dataclass(frozen=True, slots=True)
class Hold:
    """A conversation brake's verdict on a send: hold it for a person (pigeond/brakes/)."""

    brake: str  # "hops" | "pair_rate" | "repeat" | "budget"
    reason: str  # one line, for the sender's tool answer and the operator's views


# A thread's id: a sender may name one (``thread`` of a send), else pigeond makes
# ``thr_<random>``.
THREAD_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")

# Sent by pigeond itself to a sender whose message ended failed or expired.
NOTICE_KIND: Final = "delivery.failed"
NOTICE_SENDER: Final = "pigeond"
# No sender may take the daemon's name (any case, or with a suffix such as
# ``pigeond.notice``): otherwise anyone could forge its failure notices.
RESERVED_SENDER_RE: Final = re.compile(r"^pigeond(?:[._-].*)?$", re.IGNORECASE)


def is_reserved_sender(name: str) -> bool:
    return RESERVED_SENDER_RE.fullmatch(name) is not None


# The receipt chain of a direct message, in order, and what each stage means.
RECEIPT_MEANINGS: Final = {
    "accepted": "stored by pigeond",
    "handed_off": "opencode took the prompt",
    "seen": "its envelope is in the target's transcript",
    "answered": "the turn that read it ended with the target's reply",
}
RECEIPT_STAGES: Final = tuple(RECEIPT_MEANINGS)


def receipt_stage(state: str, verified_at: int | None, answered_at: int | None) -> str:
    """The last stage of :data:`RECEIPT_STAGES` a message in ``state`` has reached.  Only a
    hand-off has gone past ``accepted``: a message queued again (never seen), failed or
    expired is back at, or stopped at, the first stage; its state says the rest."""
    if state != State.HANDED_OFF:
        return RECEIPT_STAGES[0]
    if answered_at is not None:
        return RECEIPT_STAGES[3]
    return RECEIPT_STAGES[2] if verified_at is not None else RECEIPT_STAGES[1]


@dataclass(frozen=True, slots=True)
class HandoffMode:
    """What a hand-off's prompt named: agent, model (provider and id) and variant, each
    None for opencode's default; ``note`` says why less than the target's own was named."""

    agent: str | None = None
    provider: str | None = None
    model: str | None = None
    variant: str | None = None
    note: str | None = None


NO_MODE: Final = HandoffMode()


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A validated send request, defaults applied: what idempotency compares."""

    msg_id: str
    from_session: str
    to_session: str | None
    channel: str | None
    kind: str
    priority: str
    reply_to: str | None
    payload: str
    # the sender asks that it go into the target's running turn (opencode 2.x ``steer``),
    # not after it; only an urgent message may ask, and only a target whose policy allows
    # it is steered (pigeond/delivery/steering.py).  Last of the row's columns (migration 23).
    steer: bool = field(default=False, kw_only=True)

    def same_content(self, other: NewMessage | StoredMessage) -> bool:
        return (
            self.from_session == other.from_session
            and self.to_session == other.to_session
            and self.channel == other.channel
            and self.kind == other.kind
            and self.priority == other.priority
            and self.reply_to == other.reply_to
            and self.payload == other.payload
            and self.steer == other.steer
        )


@dataclass(frozen=True, slots=True)
class StoredMessage(NewMessage):
    """One row of ``swarm_messages``: the message plus its delivery state."""

    state: str
    attempts: int
    next_retry_at: int | None
    created_at: int
    updated_at: int
    handed_off_at: int | None
    last_error: str | None
    accept_seq: int | None
    handoff_seq: int | None
    verified_at: int | None
    verify_by: int | None
    requeue_count: int
    expires_at: int | None
    # the agent and model the (last) hand-off named, and why less was named
    handoff_agent: str | None = None
    handoff_provider: str | None = None
    handoff_model: str | None = None
    handoff_variant: str | None = None
    handoff_note: str | None = None
    # set while a hand-off may be under way: written (committed) before the call to opencode,
    # cleared when its outcome is recorded; a queued message that still has it after a
    # crash is looked for in the target's transcript before it is sent again
    handoff_intent_at: int | None = None
    # when the turn that consumed it ended with the target's assistant's reply, and
    # opencode's id of that assistant message (see pigeond/delivery/answers.py)
    answered_at: int | None = None
    answer_message_id: str | None = None
    # the names sender and target held when the message was accepted (see storage/names.py)
    from_name: str | None = None
    to_name: str | None = None
    # a channel member's delivery: the channel message it was fanned out from
    channel_msg_id: str | None = None
    # the thread it belongs to (None: stored before threads, migration 17)
    thread_id: str | None = None
    # whose hold keeps it queued and never due: 'consent' (its target's policy) or 'brake'
    # (a conversation brake, until a person decides); None when not held (migration 18)
    hold_kind: str | None = None
    # the brake that held it last and why (kept after its release), and its time to live,
    # given anew from its release (a brake-held message never expires)
    hold_brake: str | None = None
    hold_reason: str | None = None
    hold_ttl_ms: int | None = None
    # who sent it, as far as pigeond could tell (SenderProof; migration 22): a few words
    # why, and the tool call that verified it (one call verifies one message)
    from_proof: str = SenderProof.UNVERIFIED.value
    from_proof_note: str | None = None
    from_proof_call: str | None = None

    @property
    def brake_held(self) -> bool:
        """Whether a brake holds it for a person now (not delivered until released)."""
        return self.state == State.QUEUED and self.hold_kind == HOLD_BRAKE

    def receipt(self) -> str:
        """How far along :data:`RECEIPT_STAGES` a direct message has come."""
        return receipt_stage(self.state, self.verified_at, self.answered_at)

    @property
    def to_runtime(self) -> str | None:
        """The runtime of the target (None for a channel's own message, or an id of none)."""
        if self.to_session is None:
            return None
        try:
            return runtime_of(self.to_session).value
        except ValueError:
            return None

    def handed_to(self) -> dict[str, object] | None:
        """The agent and model a message was handed to, as ``GET /swarm/message`` shows it."""
        if self.handed_off_at is None:
            return None
        model = None
        if self.handoff_provider is not None and self.handoff_model is not None:
            model = {"providerID": self.handoff_provider, "modelID": self.handoff_model}
        return {
            "agent": self.handoff_agent,
            "model": model,
            "variant": self.handoff_variant,
            "note": self.handoff_note,
        }

    def inbox_view(self) -> dict[str, object]:
        """The fields ``GET /swarm/inbox`` shows, named as the seed names them."""
        return {
            "msg_id": self.msg_id,
            "from": self.from_session,
            "to": self.to_session,
            "channel": self.channel,
            "kind": self.kind,
            "priority": self.priority,
            "steer": self.steer,
            "reply_to": self.reply_to,
            "payload": self.payload,
            "created_at": self.created_at,
            "handed_off_at": self.handed_off_at,
            "verified_at": self.verified_at,
            "from_name": self.from_name,
            "to_name": self.to_name,
            "channel_msg_id": self.channel_msg_id,
            "from_verified": self.from_proof,
            "from_verified_note": self.from_proof_note,
        }


# -- pigeond's own kinds ------------------------------------------------------------------
# pigeond's own messages about an owed reply (pigeond/owed_replies.py): to the debtor
# once, then to the creditor.
REMINDER_KIND: Final = "reply.reminder"
OVERDUE_KIND: Final = "reply.overdue"
# The kinds only pigeond sends (no sender may: they are not in KINDS); undeliverable,
# one ends dropped, not failed, and tells nobody.
PIGEOND_KINDS: Final = (NOTICE_KIND, REMINDER_KIND, OVERDUE_KIND)


def first_line(payload: str, limit: int = 200) -> str:
    """A payload's first non-empty line, cut to ``limit`` characters: what a reminder quotes."""
    for line in payload.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


# -- permission requests (docs: notes/permissions.md) ----------------------------------
# opencode's id of a pending permission request (``per_…``), as pigeond accepts it in a path.
PERMISSION_ID_RE: Final = re.compile(r"^per_[A-Za-z0-9_-]{1,128}$")
# The answers opencode takes (``POST /permission/<id>/reply {"reply": …}``), in the order
# the CLI and the TUI offer them.
PERMISSION_ANSWERS: Final = ("once", "always", "reject")


class PermissionAnswerOutcome(StrEnum):
    """What became of an operator's answer to a permission request."""

    ANSWERED = "answered"  # opencode took it
    UNKNOWN = "unknown"  # pigeond has no open request by that id
    GONE = "gone"  # opencode no longer has it (answered at the target, or opencode restarted)
    TURN_ENDED = "turn_ended"  # the turn that asked has ended: answering would run a dead call
    UNREACHABLE = "unreachable"  # opencode could not be reached: nothing answered
    REFUSED = "refused"  # opencode refused the answer (its error says why)
