"""Who an agent is to pigeond: the member ids of :data:`pigeond.model.RUNTIME_IDS` as the
agent-side clients use them, and the member ``pigeon-mcp --as @name`` is."""

from __future__ import annotations

from typing import Final

from pigeond.model import MCP_MEMBER_PREFIX, NAME_RE, RUNTIME_IDS, Runtime

CLAUDE_SESSION_RE: Final = RUNTIME_IDS[Runtime.CLAUDE]
MCP_PREFIX: Final = MCP_MEMBER_PREFIX


def member_of_name(name: str) -> str:
    """The member ``pigeon-mcp --as @name`` is: ``mcp_<name>``; ValueError for a bad name."""
    if not NAME_RE.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a name (lower-case letters, digits, '.', '_' or '-',"
            " starting with a letter or digit, at most 64)"
        )
    return MCP_PREFIX + name
