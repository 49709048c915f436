"""The swarm tools an agent gets, declared once: ``pigeon-mcp`` serves exactly these, and
the skill and docs tests check their texts name the same ones."""

from __future__ import annotations

from typing import Final

TOOL_NAMES: Final[tuple[str, ...]] = (
    "swarm_send",
    "swarm_read",
    "swarm_status",
    "swarm_name",
    "swarm_channel",
    "swarm_policy",
    "swarm_owed",
    "swarm_search",
)
