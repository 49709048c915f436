"""How the fake LLM drives opencode's tools: a directive in the prompt, a streamed tool call.

A main completion whose last message is a user message containing::

    CALL <tool> <json object>            e.g.  CALL swarm_read {"limit": 2}
    CALL <tool>#<call id> <json object>  the same, with a chosen tool-call id

is answered with an OpenAI-style streamed tool call (``delta.tool_calls``: the
first chunk carries ``id``, ``type`` and ``function.name``, the next ones
argument fragments; ``finish_reason: "tool_calls"``).  The JSON is passed on
as written, so a test can send arguments a tool must refuse.  A chosen call id
lets a test make the model repeat a tool call exactly, as a provider retry does.

When the last message is the tool's result (``role: "tool"``), the reply is
text: ``TOOL_DONE <tool> <first 200 characters of the result>``.

The echo model (:func:`echo_call`, when a test turns it on) answers a prompt whose last
swarm envelope comes from another session with a ``swarm_send`` back to that session
(``reply_to`` its message): two over-polite agents that keep each other busy for ever.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DIRECTIVE_RE = re.compile(r"CALL\s+([A-Za-z0-9_-]+)(?:#([A-Za-z0-9_-]+))?\s+(\{.*\})", re.S)
Chunk = Callable[..., None]
ENVELOPE_OPENING_RE = re.compile(r"<swarm_message\b([^>]*)>")
ATTRIBUTE_RE = re.compile(r'([a-z_]+)="([^"]*)"')


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the fake model made."""

    name: str
    call_id: str
    arguments: str
    """The arguments' JSON text, as the prompt gave it."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool's result that opencode sent back to the fake model."""

    name: str
    call_id: str
    content: str


def tool_call_in(text: str) -> ToolCall | None:
    """The tool call a ``CALL`` directive in ``text`` asks for, if any."""
    match = DIRECTIVE_RE.search(text)
    if match is None:
        return None
    name, call_id, arguments = match.groups()
    return ToolCall(name, call_id or "call_" + uuid.uuid4().hex[:24], arguments)


def echo_call(text: str) -> ToolCall | None:
    """The echo model's answer to ``text``: a ``swarm_send`` thanking the sender of the
    last swarm envelope in it, as a reply to that message; None when there is no envelope,
    or it is pigeond's own notice (no one to thank)."""
    openings = ENVELOPE_OPENING_RE.findall(text)
    if not openings:
        return None
    attributes = dict(ATTRIBUTE_RE.findall(openings[-1]))
    sender, msg_id = attributes.get("from", ""), attributes.get("msg_id", "")
    if not sender.startswith("ses_") or not msg_id:
        return None
    arguments = {"to": sender, "payload": f"re: thanks, noted ({msg_id})", "reply_to": msg_id}
    return ToolCall("swarm_send", "call_" + uuid.uuid4().hex[:24], json.dumps(arguments))


def tool_result_in(
    messages: list[dict[str, Any]], text_of: Callable[[object], str]
) -> ToolResult | None:
    """The tool result the request ends with, named after the call it answers."""
    if not messages or messages[-1].get("role") != "tool":
        return None
    last = messages[-1]
    call_id = str(last.get("tool_call_id", ""))
    name = "?"
    for message in reversed(messages):
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and call.get("id") == call_id:
                name = str((call.get("function") or {}).get("name", "?"))
    return ToolResult(name, call_id, text_of(last.get("content")))


def tool_names(request: dict[str, Any]) -> tuple[str, ...]:
    """The names of the tools opencode offered in a completion request."""
    tools = request.get("tools")
    return tuple(
        str((tool.get("function") or {}).get("name"))
        for tool in (tools if isinstance(tools, list) else [])
        if isinstance(tool, dict)
    )


def answer_text(result: ToolResult) -> str:
    return f"TOOL_DONE {result.name} {' '.join(result.content.split())[:200]}"


def stream_tool_call(chunk: Chunk, call: ToolCall, pause: Callable[[], None]) -> None:
    """Write ``call`` as streamed chunks; ``pause`` sleeps between them."""
    first = {"index": 0, "id": call.call_id, "type": "function"}
    chunk(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [first | {"function": {"name": call.name, "arguments": ""}}],
        }
    )
    half = max(1, len(call.arguments) // 2)
    for fragment in (call.arguments[:half], call.arguments[half:]):
        pause()
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]})
    pause()
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    chunk({}, finish="tool_calls", usage=usage)
