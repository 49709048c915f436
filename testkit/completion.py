"""What the fake LLM records and reads: completions, message texts, the kind of call."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from testkit.tool_script import ToolCall, ToolResult

Kind = Literal["main", "title"]


def ack_for(text: str) -> str:
    """The fake model's reply to a prompt whose last user text is ``text``."""
    return "ACK " + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def content_text(content: object) -> str:
    """The plain text of an OpenAI message ``content``: a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text"):
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
        return "\n".join(texts)
    return ""


def system_text(messages: list[dict[str, Any]]) -> str:
    return " ".join(content_text(m.get("content")) for m in messages if m.get("role") == "system")


def classify(messages: list[dict[str, Any]]) -> Kind:
    """``title`` for opencode's title-generator call ("You are a title generator..."), else main."""
    return "title" if "title generator" in system_text(messages).lower() else "main"


@dataclass(frozen=True, slots=True)
class Completion:
    """One ``POST /v1/chat/completions`` the fake answered (or that ended early)."""

    kind: Kind
    session: str | None
    """The session id opencode sent (``x-session-affinity``), or None."""
    user_agent: str
    """opencode's ``User-Agent``, e.g. ``opencode/1.18.33 ai-sdk/... runtime/bun/...``."""
    start: float
    """``time.monotonic()`` when the request body had been read."""
    end: float
    """``time.monotonic()`` when the answer was written, or the client went away."""
    user_texts: tuple[str, ...]
    """The text of every ``role: "user"`` message in the request, in order."""
    last_user_text: str
    """The text of the last user message ("" when there is none)."""
    last_role: str
    """The role of the request's last message; ``assistant`` means a prefill."""
    n_messages: int
    system_head: str
    """The first 80 characters of the system prompt (what tells the kinds of call apart)."""
    reply: str
    error: str | None
    """Why the answer did not finish (e.g. the client closed the stream), else None."""
    tools: tuple[str, ...] = ()
    """The names of the tools opencode offered."""
    tool_call: ToolCall | None = None
    """The tool call the model made instead of a text reply."""
    tool_result: ToolResult | None = None
    """The tool result this completion answered."""
    model: str = ""
    """The ``model`` the request asked for (opencode sends the model id, ``fake-model``)."""

    @property
    def duration(self) -> float:
        return self.end - self.start

    def overlaps(self, other: Completion) -> bool:
        """True when the two requests were in flight at the same time."""
        return self.start < other.end and other.start < self.end
