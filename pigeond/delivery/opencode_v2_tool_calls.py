"""The pigeond tool calls in an opencode 2.x transcript (``GET /api/session/{id}/message``),
for :class:`~pigeond.delivery.tool_call_reader.OpencodeToolCalls`, which reads a 2.x's
transcript only once the server is found to be a 2.x (the dialect's verdict, as every
2.x read).

Where a 2.x writes a call, per its message types (npm ``@opencode-ai/sdk`` 1.19.6,
``dist/v2/gen/types.gen.d.ts``: ``SessionMessageAssistant``,
``SessionMessageAssistantTool``): each ``assistant`` message has ``content`` parts, and a
tool call is the part ``{"type": "tool", "id": <the call's id>, "name": <the tool>,
"state": {"status": …, "input": …}, "time": {…}}``.  Its ``status`` is ``pending`` while
the model still writes the arguments (``input`` is then their raw text: no call made
yet), ``running`` while the tool executes (``input`` the arguments object), then
``completed`` or ``error``.  The part's ``id`` is the call's id: the 2.x protocol's own
conversion to 1.x messages makes it the part's ``callID``, and the 2.x plugin passes it
to the tool as ``context.id`` (which pigeond's plugin sends as ``call_id`` and derives a
send's msg_id from).  Read from the types and the stand-in built from them; no real 2.x
server has been read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol

from pigeond.agents.tool_names import TOOL_NAMES
from pigeond.tool_calls import ToolCall

# A call's states once its result is in (1.x and 2.x alike).
FINISHED_STATES: Final = frozenset({"completed", "error"})


class V2Messages(Protocol):
    """What is read of a 2.x (:class:`~pigeond.delivery.opencode_v2_client.OpencodeV2Client`)."""

    async def messages(self, session_id: str, limit: int | None) -> list[dict[str, Any]]: ...


def opencode_v2_calls(messages: Iterable[Mapping[str, Any]]) -> list[ToolCall]:
    """The pigeond tool calls in 2.x messages (oldest first), in order; a ``pending`` part
    (its arguments still being written) is no call yet."""
    steps = [m.get("content") for m in messages if m.get("type") == "assistant"]
    calls = (_v2_call(part) for content in steps if isinstance(content, list) for part in content)
    return [call for call in calls if call is not None]


def _v2_call(part: object) -> ToolCall | None:
    if not isinstance(part, dict) or part.get("type") != "tool":
        return None
    return tool_part_call(part.get("name"), part.get("id"), part.get("state"))


def tool_part_call(tool: object, call_id: object, state: object) -> ToolCall | None:
    """The pigeond call an opencode tool part (1.x or 2.x) names, if it is one whose
    arguments are known: its tool, its call's id, and its state's status and ``input``
    (pending, ``input`` is a 2.x's raw text still being written: nothing called yet)."""
    if tool not in TOOL_NAMES or not isinstance(call_id, str) or not isinstance(state, dict):
        return None
    arguments = state.get("input")
    if not isinstance(arguments, dict):
        return None
    return ToolCall(call_id, str(tool), arguments, state.get("status") in FINISHED_STATES)
