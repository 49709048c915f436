"""The message vocabulary shared by the routes, storage, arbiter and tools."""

from __future__ import annotations

import re
from dataclasses import dataclass
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
DEFAULT_KIND: Final = "chat"
DEFAULT_PRIORITY: Final = "normal"

SESSION_ID_RE: Final = re.compile(r"^ses_[A-Za-z0-9_-]{1,128}$")
SENDER_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
MSG_ID_RE: Final = re.compile(r"^msg_[A-Za-z0-9_-]{1,128}$")
CHANNEL_RE: Final = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class State(StrEnum):
    QUEUED = "queued"
    HANDED_OFF = "handed_off"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    # a delivery.failed notice that could not be delivered either: nothing to fix
    DROPPED = "dropped"


# Sent by pigeond itself to a sender whose message ended failed or expired.
NOTICE_KIND: Final = "delivery.failed"
NOTICE_SENDER: Final = "pigeond"
# No sender may take the daemon's name (any case, or with a suffix such as
# ``pigeond.notice``): otherwise anyone could forge its failure notices.
RESERVED_SENDER_RE: Final = re.compile(r"^pigeond(?:[._-].*)?$", re.IGNORECASE)


def is_reserved_sender(name: str) -> bool:
    return RESERVED_SENDER_RE.fullmatch(name) is not None


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

    def same_content(self, other: NewMessage | StoredMessage) -> bool:
        return (
            self.from_session == other.from_session
            and self.to_session == other.to_session
            and self.channel == other.channel
            and self.kind == other.kind
            and self.priority == other.priority
            and self.reply_to == other.reply_to
            and self.payload == other.payload
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
            "reply_to": self.reply_to,
            "payload": self.payload,
            "created_at": self.created_at,
            "handed_off_at": self.handed_off_at,
            "verified_at": self.verified_at,
        }
