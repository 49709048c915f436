"""docs/agents.md names exactly the tools the opencode plugin defines, with their arguments,
read from the plugin's JavaScript itself."""

from __future__ import annotations

import re

from tests.docs_pages import REPO, page, section

PLUGIN = REPO / "packaging" / "opencode-plugin" / "pigeond-swarm.js"
AGENTS = page("agents.md")


def plugin_tools() -> list[str]:
    """The tools ``makeTools`` returns: the names in its final ``return { ... };``."""
    source = PLUGIN.read_text(encoding="utf-8")
    body = source.split("function makeTools(", 1)[1]
    [names] = re.findall(r"^  return \{ ([a-z_, ]+) \};$", body.split("\n}\n", 1)[0], re.M)
    return [n.strip() for n in names.split(",")]


def plugin_arguments() -> dict[str, list[str]]:
    """Each tool's arguments, from its parser (``checkArgs(tool, args, [...])``)."""
    source = PLUGIN.read_text(encoding="utf-8")
    found = re.findall(
        r'const tool = "([a-z_]+)";\n\s*checkArgs\(tool, args, \[([^\]]*)\]\);', source
    )
    return {tool: re.findall(r'"([a-z_]+)"', allowed) for tool, allowed in found}


def documented_tools() -> list[str]:
    """The tools docs/agents.md gives a section: a ``### `swarm_…``` heading."""
    text = section(AGENTS, "The tools, and what the model sees")
    return re.findall(r"^### `([a-z_]+)`$", text, flags=re.M)


def documented_arguments(tool: str) -> list[str]:
    """The arguments in the tool's signature line: ``swarm_send {to | channel, payload, …}``."""
    text = section(AGENTS, f"`{tool}`")
    [signature] = re.findall(rf"^`{tool} \{{([^}}]*)\}}`", text, flags=re.M)
    return [word.rstrip("?") for word in re.findall(r"[a-z_]+\??", signature)]


def test_the_plugin_defines_tools_and_parses_each_one_s_arguments() -> None:
    """The JavaScript is read as expected: six tools, each with an argument parser."""
    tools = plugin_tools()
    assert len(tools) == 6, tools
    assert sorted(plugin_arguments()) == sorted(tools)


def test_the_docs_name_exactly_the_plugin_s_tools() -> None:
    """One section per tool the plugin defines, none for a tool it does not."""
    assert sorted(documented_tools()) == sorted(plugin_tools())


def test_the_overview_table_lists_every_tool() -> None:
    """The table at the top of the page links every tool's section, and only those."""
    text = AGENTS.read_text(encoding="utf-8")
    listed = re.findall(r"^\| \[`([a-z_]+)`\]\(#\1\) \|", text, flags=re.M)
    assert sorted(listed) == sorted(plugin_tools())


def test_each_tool_s_signature_names_exactly_its_arguments() -> None:
    """The signature line of each tool's section names the arguments the plugin accepts."""
    arguments = plugin_arguments()
    for tool in plugin_tools():
        assert sorted(documented_arguments(tool)) == sorted(arguments[tool]), tool
