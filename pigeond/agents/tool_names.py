"""The swarm tools an agent has (pigeon-mcp's MCP tools; the opencode plugin has the first
six), declared once: the skill (pigeond/agents/skill/) may name only these."""

from __future__ import annotations

from typing import Final

TOOL_NAMES: Final = (
    "swarm_send",
    "swarm_read",
    "swarm_status",
    "swarm_name",
    "swarm_channel",
    "swarm_policy",
    "swarm_owed",
    "swarm_search",
)
