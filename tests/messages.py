"""Builders for test messages."""

from __future__ import annotations

import itertools

from pigeond.model import NewMessage

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
    )
