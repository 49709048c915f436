"""Reading a Claude Code session's transcript: which envelopes it received, and answered.

Claude Code writes each session's transcript as JSON lines (``transcript_path`` in every
hook's input).  What Claude Code 2.1.332 writes (recorded in tests/fixtures/claude/):

- every line is an object with a ``type``; the conversation is in the ``"user"`` and
  ``"assistant"`` entries, each with its own ``uuid``, ``parentUuid`` and ``message``
  (``{"role", "content"}``, content a string or a list of blocks); the rest is
  bookkeeping (``attachment``, ``system``, ``queue-operation``, ``api-request*``,
  ``last-prompt``, ``cost-state`` ...), some of which repeat the user's text
  (``api-request-blob``, a Stop hook's ``hook_blocking_error`` attachment);
- a typed prompt is a user entry whose content is the text;
- a Stop hook's ``{"decision": "block", "reason": R}`` becomes a user entry (``isMeta``,
  ``rowSource: "hook"``) whose content is ``"Stop hook feedback:\\n" + R``, followed by the
  assistant entries of the turn it starts;
- a tool's result is a user entry whose content is a ``tool_result`` block, after the
  assistant entry with the ``tool_use`` block;
- an assistant entry holds one content block (``text``, ``tool_use``, ``thinking``), with
  the API message's ``stop_reason`` (``"tool_use"`` when the model calls a tool);
  Claude Code's own stand-ins (an API error) have ``isApiErrorMessage`` or the model
  ``"<synthetic>"``.

So an envelope counts as **seen** when a line of a user entry's own text (a string
content, or a ``text`` block) begins with its opening tag: a Stop hook's feedback, a
channel's text, a prompt.  A tool's result never counts, nor an assistant's words, nor the
bookkeeping: a tool that quotes an envelope has not delivered it.  A payload cannot fake
one: it is escaped, so no line of it begins with ``<``.  It counts as **answered** when an
assistant entry with words (not a tool call's preamble, not a stand-in) follows it.

Stdlib only and pure: the daemon reads the file (:func:`read_tail`) where it likes.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

# An opening tag at the start of any line of a text, and its msg_id attribute.
_OPENING_MSG_ID = re.compile(r'^<swarm_message [^>\n]*\bmsg_id="([^"\n]*)"', re.MULTILINE)
# How much of a transcript's end is read by default: transcripts grow with every tool's
# output (megabytes in a long session), and a hand-off is looked for soon after it.
TAIL_BYTES = 4 * 1024 * 1024
SYNTHETIC_MODEL = "<synthetic>"


def _message(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    message = entry.get("message")
    return message if isinstance(message, dict) else {}


def _conversation(entry: Mapping[str, Any], kind: str) -> bool:
    """A main-thread entry of ``kind`` ("user" or "assistant") with a uuid (a subagent's
    own thread, ``isSidechain``, is written by the model, not delivered to it)."""
    return (
        entry.get("type") == kind
        and _message(entry).get("role") == kind
        and entry.get("isSidechain") is not True
        and isinstance(entry.get("uuid"), str)
    )


def user_texts(entry: Mapping[str, Any]) -> Iterator[str]:
    """A user entry's own texts: its string content, or its ``text`` blocks (never a
    ``tool_result``'s content)."""
    content = _message(entry).get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str):
                    yield text


def envelope_ids(text: str) -> list[str]:
    """The msg_ids of the ``<swarm_message ...>`` opening tags that begin a line of ``text``."""
    return _OPENING_MSG_ID.findall(text)


def envelope_homes(entries: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """msg_id → the uuid of the first user entry one of whose texts has a line beginning
    with its opening tag (see the module's docstring for what counts)."""
    homes: dict[str, str] = {}
    for entry in entries:
        if not _conversation(entry, "user"):
            continue
        for text in user_texts(entry):
            for msg_id in envelope_ids(text):
                homes.setdefault(msg_id, entry["uuid"])
    return homes


def person_prompt_at(entry: Mapping[str, Any]) -> int | None:
    """When ``entry`` was written (ms since the epoch), if it is a person's own prompt: a
    user entry of the conversation with text of its own, none of it an envelope, and not
    one Claude Code wrote itself (``isMeta``: a Stop hook's feedback, a channel's push, a
    reminder).  None for anything else (a tool's result has no text of its own)."""
    if not _conversation(entry, "user") or entry.get("isMeta") is True:
        return None
    texts = list(user_texts(entry))
    if not texts or any(envelope_ids(text) for text in texts):
        return None
    stamp = entry.get("timestamp")
    if not isinstance(stamp, str):
        return None
    try:
        written = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if written.tzinfo is None:
        return None
    return int(written.timestamp() * 1000)


def is_reply(entry: Mapping[str, Any]) -> bool:
    """An assistant entry with words of the model's own: a text block that is not blank,
    not in a message that goes on to call a tool, not a stand-in Claude Code wrote."""
    message = _message(entry)
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return (
        _conversation(entry, "assistant")
        and entry.get("isApiErrorMessage") is not True
        and message.get("model") != SYNTHETIC_MODEL
        and message.get("stop_reason") != "tool_use"
        and any(
            isinstance(b, dict)
            and b.get("type") == "text"
            and isinstance(b.get("text"), str)
            and b["text"].strip() != ""
            for b in blocks
        )
    )


def answers_in(entries: Sequence[Mapping[str, Any]], where: Mapping[str, str]) -> dict[str, str]:
    """For each msg_id in ``where`` (mapped to its envelope's user entry, as
    :func:`envelope_homes` found it), the uuid of the first reply (:func:`is_reply`) after
    that entry.  ``entries`` is the transcript or its newest part, oldest first: a home not
    among them is older than all of them (a transcript only grows), so any reply in them
    answers it."""
    position = {e["uuid"]: n for n, e in enumerate(entries) if _conversation(e, "user")}
    replies = [(n, e["uuid"]) for n, e in enumerate(entries) if is_reply(e)]
    found: dict[str, str] = {}
    for msg_id, home in where.items():
        after = position.get(home, -1)
        reply = next((uuid for n, uuid in replies if n > after), None)
        if reply is not None:
            found[msg_id] = reply
    return found


def parse_lines(data: bytes) -> list[dict[str, Any]]:
    """The JSON objects of complete lines in ``data``; a line that is not one (malformed,
    not UTF-8, too deeply nested, not an object, or the unfinished last line) is skipped."""
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: empty, or a line still being written
    entries = []
    for line in lines:
        if not line.strip():
            continue
        try:
            parsed = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            continue
        if isinstance(parsed, dict):
            entries.append(parsed)
    return entries


def read_tail(path: str | os.PathLike[str], max_bytes: int = TAIL_BYTES) -> list[dict[str, Any]]:
    """The entries in the last ``max_bytes`` of the transcript at ``path``, oldest first
    (a line cut by the start of that window is skipped).  Raises OSError only: the file is
    missing, unreadable or not a regular file (a FIFO would block the reader); what it
    holds never raises."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{os.fspath(path)} is not a regular file")
        start = max(0, info.st_size - max(0, max_bytes))
        # from one byte early: whether the window starts at the start of a line
        f.seek(max(0, start - 1))
        data = f.read(info.st_size - max(0, start - 1))
    if start == 0:
        return parse_lines(data)
    first_newline = data.find(b"\n")
    return [] if first_newline < 0 else parse_lines(data[first_newline + 1 :])
