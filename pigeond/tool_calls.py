"""What a member's own transcript says it called: the tool calls pigeond looks for to tell a
request an agent really made from one that only claims to be that agent.

An agent's pigeond tools (the opencode plugin's, ``pigeon-mcp``'s) run while the agent's
own transcript already holds the call: opencode stores the tool part, with its call id and
input, before it runs the tool; Claude Code writes the ``tool_use`` block before it calls
the MCP server.  Another process can claim any ``from`` in a request, but it cannot put a
call into another session's transcript.  So a request is the member's own when a call
of the right tool, with the same input, is found in that member's transcript.

The readers live in the delivery layer (they talk to opencode and read files); the API
depends only on :class:`ToolCallReader`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from pigeond.model import TOOL_MSG_ID_PREFIX

# The opencode plugin's msg_id for a send: derived from the session and the tool call's
# id, so a retried call sends once and the call that made a message can be found from
# the message (pigeond-swarm.js, messageIdFor).
PLUGIN_MSG_ID_HEX: Final = 32


def plugin_msg_id(session: str, call_id: str) -> str:
    """The msg_id the opencode plugin gives a send made by tool call ``call_id``."""
    digest = hashlib.sha256(f"{session}\n{call_id}".encode()).hexdigest()
    return TOOL_MSG_ID_PREFIX + digest[:PLUGIN_MSG_ID_HEX]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of a pigeond tool in a member's transcript."""

    call_id: str  # opencode's callID, Claude Code's tool_use id
    tool: str  # the tool's own name (``swarm_send``), without an MCP prefix
    input: Mapping[str, Any]
    finished: bool  # its result is in the transcript (it is no longer in flight)


class TranscriptUnreadable(Exception):
    """The member's transcript should be readable but is not now (its runtime is out, its
    file is gone, the read passed its deadline): the caller may try again later."""


class ToolCallReader(Protocol):
    """Finds a member's recent pigeond tool calls in its own transcript."""

    async def recent_calls(self, member: str) -> Sequence[ToolCall] | None:
        """The member's most recent pigeond tool calls, oldest first (a bounded tail of
        its transcript); None when pigeond has no transcript of this member to read (an
        MCP-only member, an unknown id).  Raises :class:`TranscriptUnreadable`."""
        ...
