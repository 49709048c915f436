"""The swarm-messaging skill (pigeond/agents/skill/) names only what exists."""

from __future__ import annotations

import re
from pathlib import Path

from pigeond.agents.tool_names import TOOL_NAMES
from pigeond.cli.install_plugin import SKILL_NAME, bundled_skill
from pigeond.consent import POLICIES
from pigeond.model import KINDS, PIGEOND_KINDS

SKILL = bundled_skill().decode("utf-8")
PLUGIN = Path(__file__).resolve().parent.parent / "pigeond" / "opencode-plugin" / "pigeond-swarm.js"


def front_matter() -> dict[str, str]:
    match = re.match(r"---\n(.*?)\n---\n", SKILL, re.S)
    assert match is not None, "the skill starts with YAML front matter between --- lines"
    pairs = (line.split(": ", 1) for line in match.group(1).splitlines())
    return {key: value for key, value in pairs}


def test_the_front_matter_names_and_describes_the_skill() -> None:
    """Claude Code and opencode need name (the folder's) and description."""
    matter = front_matter()
    assert set(matter) == {"name", "description"}
    assert matter["name"] == SKILL_NAME
    assert 50 < len(matter["description"]) <= 1024


def test_every_tool_it_names_exists_and_every_tool_is_named() -> None:
    """swarm_* words are the declared tools (or the envelope's tag), and all are taught."""
    named = set(re.findall(r"\bswarm_[a-z_]+\b", SKILL)) - {"swarm_message"}
    assert named == set(TOOL_NAMES)


def test_every_kind_it_names_exists_and_every_kind_is_named() -> None:
    """Dotted kinds in backticks are pigeond's kinds, and every kind is explained."""
    named = set(re.findall(r"`([a-z]+\.[a-z]+)`", SKILL))
    assert named == set(KINDS[1:]) | set(PIGEOND_KINDS)
    assert "`chat`" in SKILL


def test_every_policy_is_named() -> None:
    """The inbound policies swarm_policy sets are the consent module's."""
    assert all(f"`{policy}`" in SKILL for policy in POLICIES)


def test_the_opencode_plugin_has_the_first_six_tools() -> None:
    """The plugin defines exactly TOOL_NAMES[:6] (the MCP server has all of them)."""
    defined = re.findall(r"^  const (swarm_[a-z_]+) = \{", PLUGIN.read_text(encoding="utf-8"), re.M)
    assert sorted(defined) == sorted(TOOL_NAMES[:6])
