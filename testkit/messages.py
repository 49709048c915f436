"""Builders for test messages."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from pigeond.model import NewMessage, StoredMessage

_ids = itertools.count(1)


def new_message(
    to: str | None = "ses_target",
    *,
    msg_id: str | None = None,
    sender: str = "ses_sender",
    channel: str | None = None,
    kind: str = "chat",
    priority: str = "normal",
    reply_to: str | None = None,
    payload: str = "hello",
    steer: bool = False,
) -> NewMessage:
    return NewMessage(
        msg_id=msg_id or f"msg_test{next(_ids)}",
        from_session=sender,
        to_session=None if channel is not None else to,
        channel=channel,
        kind=kind,
        priority=priority,
        reply_to=reply_to,
        payload=payload,
        steer=steer,
    )


def queued(message: NewMessage, accept_seq: int = 1) -> StoredMessage:
    """``message`` as it is stored once accepted, waiting for its hand-off."""
    return StoredMessage(
        **dataclasses.asdict(message), state="queued", attempts=0, next_retry_at=None,
        created_at=0, updated_at=0, handed_off_at=None, last_error=None, accept_seq=accept_seq,
        handoff_seq=None, verified_at=None, verify_by=None, requeue_count=0, expires_at=None,
    )  # fmt: skip


def user_entry(message_id: str, *texts: str) -> dict[str, Any]:
    """One user message of a ``GET /session/<id>/message`` answer, one text part per text,
    shaped as opencode 1.18.33 writes it."""
    return {
        "info": {"id": message_id, "role": "user", "agent": "build", "time": {"created": 1}},
        "parts": [{"type": "text", "text": text} for text in texts],
    }


def assistant_entry(
    message_id: str,
    parent_id: str,
    text: str | None = "ACK",
    *,
    finish: str | None = "stop",
    completed: bool = True,
    error: dict[str, Any] | None = None,
    tokens: tuple[int, int] = (0, 0),
    cost: float = 0,
) -> dict[str, Any]:
    """One assistant message (one step of a turn) answering ``parent_id``, as opencode
    1.18.33 writes it: ``text`` None writes no text part (a tool step); ``tokens`` its
    (input, output) tokens, ``cost`` its dollars."""
    info: dict[str, Any] = {
        "id": message_id, "role": "assistant", "parentID": parent_id, "agent": "build",
        "time": {"created": 2, **({"completed": 3} if completed else {})},
        "cost": cost, "tokens": {"total": sum(tokens), "input": tokens[0], "output": tokens[1],
                                 "reasoning": 0, "cache": {"read": 0, "write": 0}},
    }  # fmt: skip
    if finish is not None:
        info["finish"] = finish
    if error is not None:
        info["error"] = error
    parts: list[dict[str, Any]] = [{"type": "step-start"}]
    if text is not None:
        parts.append({"type": "text", "text": text})
    if finish is not None:
        parts.append({"type": "step-finish", "reason": finish})
    return {"info": info, "parts": parts}
