"""Who an agent is to pigeond: the three shapes of a session id and the runtime each
means (the contract with the daemon side).

The one place the agent side spells them: when ``pigeond.model`` declares them
(``SESSION_ID_RE`` for all three, ``runtime_of``), this module is repointed there.
"""

from __future__ import annotations

import re
from typing import Final

from pigeond.model import NAME_RE

OPENCODE_SESSION_RE: Final = re.compile(r"^ses_[A-Za-z0-9_-]{1,128}$")
# a Claude Code session id exactly as Claude Code gives it (CLAUDE_CODE_SESSION_ID)
CLAUDE_SESSION_RE: Final = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)
# a member whose client gives no session id (Codex): mcp_<name>
MCP_MEMBER_RE: Final = re.compile(r"^mcp_[a-z0-9][a-z0-9_.-]{0,63}$")
MCP_PREFIX: Final = "mcp_"


def is_session_id(value: str) -> bool:
    """Whether ``value`` is a session id of any runtime pigeond delivers to."""
    return any(r.fullmatch(value) for r in (OPENCODE_SESSION_RE, CLAUDE_SESSION_RE, MCP_MEMBER_RE))


def runtime_of(session: str) -> str:
    """``opencode``, ``claude`` or ``mcp``; ValueError for anything else."""
    if OPENCODE_SESSION_RE.fullmatch(session):
        return "opencode"
    if CLAUDE_SESSION_RE.fullmatch(session):
        return "claude"
    if MCP_MEMBER_RE.fullmatch(session):
        return "mcp"
    raise ValueError(f"not a session id: {session!r}")


def member_of_name(name: str) -> str:
    """The member ``pigeon-mcp --as @name`` is: ``mcp_<name>``; ValueError for a bad name."""
    if not NAME_RE.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a name (lower-case letters, digits, '.', '_' or '-',"
            " starting with a letter or digit, at most 64)"
        )
    return MCP_PREFIX + name
