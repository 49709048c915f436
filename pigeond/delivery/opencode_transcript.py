"""Where an envelope is in an opencode transcript (``GET /session/<id>/message``).

A hand-off is *seen* once a user text part begins with the envelope's opening tag
carrying its msg_id; a payload that merely mentions the id does not count, because the
payload is escaped and can never begin a part with a tag.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol


def user_texts_of(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The non-synthetic text parts of the user messages, in order."""
    texts: list[str] = []
    for message in messages:
        info = message.get("info")
        if not isinstance(info, dict) or info.get("role") != "user":
            continue
        for part in message.get("parts") or []:
            if (
                isinstance(part, dict)
                and part.get("type") == "text"
                and not part.get("synthetic")
                and isinstance(part.get("text"), str)
            ):
                texts.append(part["text"])
    return texts


_OPENING_MSG_ID = re.compile(r'^<swarm_message [^>]*\bmsg_id="([^"]*)"')
# The newest messages read first: an envelope handed off lately, and its answer, are there.
RECENT_MESSAGES = 50


class TranscriptReader(Protocol):
    """What is read of opencode (:class:`~pigeond.delivery.opencode_client.OpencodeClient`)."""

    async def messages(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]: ...


def envelope_ids(texts: Iterable[str]) -> set[str]:
    """msg_ids of the parts that begin with a ``<swarm_message ...>`` opening tag."""
    ids = set()
    for text in texts:
        match = _OPENING_MSG_ID.match(text)
        if match is not None:
            ids.add(match.group(1))
    return ids


def envelope_homes(messages: Iterable[dict[str, Any]]) -> dict[str, str | None]:
    """msg_id → opencode's id of the user message with a part that begins with its
    ``<swarm_message ...>`` opening tag (see :func:`envelope_ids`); None when it has none."""
    homes: dict[str, str | None] = {}
    for message in messages:
        home = message.get("info", {}).get("id")
        found = envelope_ids(user_texts_of([message]))
        homes.update(dict.fromkeys(found, home if isinstance(home, str) else None))
    return homes
