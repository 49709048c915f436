"""Reading in a transcript whether the turn that consumed a seen message answered it.

What opencode 1.18.33 writes (``GET /session/<id>/message``, checked against the real
server in tests/e2e/test_receipts_e2e.py):

- every assistant message's ``info.parentID`` is the id of the user message whose turn
  it belongs to; a batch (several envelopes, one prompt) is one user message, so one
  turn answers all of it;
- a turn that calls tools is several assistant messages with that one parent: each step
  but the last ends with ``finish: "tool-calls"`` and the loop calls the model again
  (``"unknown"`` too); the last step has another finish (``"stop"``), ``time.completed``,
  and the text the model wrote;
- an aborted turn's assistant message has ``error`` (``MessageAbortedError``), no finish;
  a model that cannot be called leaves no assistant message at all;
- a prompt that arrives while a turn runs is a user message of its own, answered by a
  turn of its own after that one; when two prompts reach the model in one call, the
  reply's parent is the later one.

So a message is **answered** when the newest assistant message of the turn that
consumed it (the first user message, from the one carrying its envelope on, that any
assistant message answers) is completed, has no error, ended the loop, and has text.
A turn that ends in an error, or without a word, does not answer: the sender's receipt
stays at "seen" rather than claim a reply that nobody wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Finishes after which opencode's loop calls the model again: the turn goes on.
TURN_GOES_ON = ("tool-calls", "unknown")


def _info(message: Mapping[str, Any]) -> Mapping[str, Any]:
    info = message.get("info")
    return info if isinstance(info, dict) else {}


def has_text(parts: object) -> bool:
    """Whether ``parts`` (a message's parts, 1.x's ``parts`` or 2.x's ``content``) hold
    a text part that is not blank."""
    return isinstance(parts, list) and any(
        isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
        and part["text"].strip() != ""
        for part in parts
    )


def is_reply(message: Mapping[str, Any]) -> bool:
    """Whether an assistant message ended its turn with words: completed, no error, a
    finish that stops the loop, and a text part that is not blank."""
    info = _info(message)
    time = info.get("time")
    finish = info.get("finish")
    return (
        info.get("role") == "assistant"
        and isinstance(time, dict)
        and time.get("completed") is not None
        and not info.get("error")
        and isinstance(finish, str)
        and finish not in TURN_GOES_ON
        and has_text(message.get("parts"))
    )


@dataclass(frozen=True, slots=True)
class Steps:
    """A transcript (or its newest part) as every question about its turns reads it: its
    user messages' ids, oldest first, with their positions; each user message's assistant
    messages, oldest first; and the ids of all its messages.  Built once per transcript
    read: a look asks for both its ended turns and its answers."""

    users: list[str]
    position: dict[str, int]
    steps: dict[str, list[Mapping[str, Any]]]  # parent id -> its assistant messages
    ids: set[object]


def steps_of(messages: Sequence[Mapping[str, Any]]) -> Steps:
    users: list[str] = []
    steps: dict[str, list[Mapping[str, Any]]] = {}
    ids: set[object] = set()
    for message in messages:
        info = _info(message)
        ids.add(info.get("id"))
        if info.get("role") == "user" and isinstance(info.get("id"), str):
            users.append(info["id"])
        elif info.get("role") == "assistant" and isinstance(info.get("parentID"), str):
            steps.setdefault(info["parentID"], []).append(message)
    return Steps(users, {user: n for n, user in enumerate(users)}, steps, ids)


def consumers_in(
    messages: Sequence[Mapping[str, Any]], homes: Mapping[str, str], index: Steps | None = None
) -> tuple[dict[str, str], dict[str, list[Mapping[str, Any]]]]:
    """For each pigeond msg_id in ``homes`` (mapped to the id of the user message that
    carried its envelope), the id of the user message whose turn consumed it, when an
    assistant message answers one yet; and, per such user message, its assistant messages
    (oldest first).  ``messages`` is a transcript, or its newest part, oldest first: a user
    message older than that part still has the assistant messages naming it as parent.
    ``index``: :func:`steps_of` ``messages``, when already built."""
    index = steps_of(messages) if index is None else index
    users, position, steps = index.users, index.position, index.steps
    consumers: dict[str, str] = {}
    for msg_id, home in homes.items():
        consumer = home if home in steps else None
        if consumer is None and home in position:
            consumer = next((u for u in users[position[home] :] if u in steps), None)
        if consumer is not None:
            consumers[msg_id] = consumer
    return consumers, steps


def answers_in(
    messages: Sequence[Mapping[str, Any]], homes: Mapping[str, str], index: Steps | None = None
) -> dict[str, str]:
    """For each pigeond msg_id in ``homes`` (mapped to the id of the user message that
    carried its envelope), opencode's id of the assistant message that answered it, when
    its turn has ended with a reply (see :func:`consumers_in` for ``messages``)."""
    consumers, steps = consumers_in(messages, homes, index)
    found: dict[str, str] = {}
    for msg_id, consumer in consumers.items():
        newest = steps[consumer][-1]
        answer_id = _info(newest).get("id")
        if is_reply(newest) and isinstance(answer_id, str):
            found[msg_id] = answer_id
    return found
