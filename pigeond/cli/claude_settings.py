"""Merging pigeond's entries into Claude Code's JSON settings, and taking them out again.

Pure functions over parsed JSON: each returns a new object and never touches what is not
pigeond's.  A person's own hooks, servers and keys keep their values and their order; ours
are added at the end (a new key after the others, our hook group after theirs) and
replaced where they were when an install changes them.  What is ours:

- a hook group ``{"hooks": [{"type": "command", "command": "<dir>/pigeon-hook <event>"}]}``
  under its event (any folder: a moved install is updated, not added twice);
- the MCP server named ``pigeon`` whose command's file name is ``pigeon-mcp`` (a server of
  that name running anything else is a person's, and an install refuses to replace it);
- ``"pigeon"`` in ``enabledMcpjsonServers``.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
from collections.abc import Mapping
from typing import Any, Final

SERVER_NAME: Final = "pigeon"
SERVER_PROGRAM: Final = "pigeon-mcp"
HOOK_PROGRAM: Final = "pigeon-hook"
ENABLED_KEY: Final = "enabledMcpjsonServers"


class SettingsError(ValueError):
    """A settings file that cannot be merged into; the text names what is wrong."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise SettingsError(f"the key {repeated[0]!r} appears twice")
    return dict(pairs)


def parse(text: str) -> dict[str, Any]:
    """A settings file's object (SettingsError if it is not one JSON object: rewriting a
    file with a repeated key would silently drop one of its values)."""
    try:
        parsed = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as e:
        raise SettingsError(str(e).splitlines()[0]) from e
    if not isinstance(parsed, dict):
        raise SettingsError("it is not a JSON object")
    return parsed


def render(settings: Mapping[str, Any]) -> str:
    return json.dumps(settings, indent=2, ensure_ascii=False) + "\n"


def hook_command(hook_program: str, command: str) -> str:
    return f"{shlex.quote(hook_program)} {command}"


def _our_hook_group(group: Any, command: str) -> bool:
    """Whether a hook group is the one install-claude writes for ``command``."""
    if not isinstance(group, dict) or set(group) != {"hooks"}:
        return False
    hooks = group["hooks"]
    if not isinstance(hooks, list) or len(hooks) != 1 or not isinstance(hooks[0], dict):
        return False
    hook = hooks[0]
    if set(hook) != {"type", "command"} or hook["type"] != "command":
        return False
    try:
        words = shlex.split(str(hook["command"]))
    except ValueError:
        return False
    return len(words) == 2 and os.path.basename(words[0]) == HOOK_PROGRAM and words[1] == command


def _object(settings: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = settings.get(key, {})
    if not isinstance(value, dict):
        raise SettingsError(f'"{key}" is not a JSON object')
    return value


def with_hooks(
    settings: Mapping[str, Any], hook_program: str, events: Mapping[str, str]
) -> dict[str, Any]:
    """``settings`` with our hook group for each ``events`` item (Claude Code's event →
    pigeon-hook's command): replaced where it is, else appended to that event's list."""
    merged = copy.deepcopy(dict(settings))
    hooks = _object(merged, "hooks")
    for event, command in events.items():
        groups = hooks.get(event, [])
        if not isinstance(groups, list):
            raise SettingsError(f'"hooks"."{event}" is not a JSON list')
        ours = {"hooks": [{"type": "command", "command": hook_command(hook_program, command)}]}
        found = [n for n, group in enumerate(groups) if _our_hook_group(group, command)]
        if found:
            groups[found[0]] = ours
            for extra in reversed(found[1:]):
                del groups[extra]
        else:
            groups.append(ours)
        hooks[event] = groups
    merged["hooks"] = hooks
    return merged


def without_hooks(settings: Mapping[str, Any], events: Mapping[str, str]) -> dict[str, Any]:
    """``settings`` without our hook groups; an event (and ``hooks``) left empty goes."""
    merged = copy.deepcopy(dict(settings))
    if "hooks" not in merged:
        return merged
    hooks = _object(merged, "hooks")
    for event, command in events.items():
        groups = hooks.get(event)
        if not isinstance(groups, list):
            continue
        kept = [group for group in groups if not _our_hook_group(group, command)]
        if len(kept) == len(groups):
            continue
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if not hooks:
        del merged["hooks"]
    return merged


def _our_server(server: Any) -> bool:
    return isinstance(server, dict) and (
        os.path.basename(str(server.get("command", ""))) == SERVER_PROGRAM
    )


def with_server(config: Mapping[str, Any], server_program: str) -> dict[str, Any]:
    """``config`` with the ``pigeon`` MCP server running ``server_program``."""
    merged = copy.deepcopy(dict(config))
    servers = _object(merged, "mcpServers")
    present = servers.get(SERVER_NAME)
    if present is not None and not _our_server(present):
        raise SettingsError(
            f'it already has an MCP server named "{SERVER_NAME}" that does not run'
            f" {SERVER_PROGRAM}; rename or remove it first"
        )
    servers[SERVER_NAME] = {"type": "stdio", "command": server_program, "args": []}
    merged["mcpServers"] = servers
    return merged


def without_server(config: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(config))
    servers = merged.get("mcpServers")
    if isinstance(servers, dict) and _our_server(servers.get(SERVER_NAME)):
        del servers[SERVER_NAME]
        if not servers:
            del merged["mcpServers"]
    return merged


def with_enabled(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` approving the project's ``pigeon`` server (.mcp.json), so an
    interactive session does not ask about it."""
    merged = copy.deepcopy(dict(settings))
    enabled = merged.get(ENABLED_KEY, [])
    if not isinstance(enabled, list):
        raise SettingsError(f'"{ENABLED_KEY}" is not a JSON list')
    if SERVER_NAME not in enabled:
        enabled.append(SERVER_NAME)
    merged[ENABLED_KEY] = enabled
    return merged


def without_enabled(settings: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(settings))
    enabled = merged.get(ENABLED_KEY)
    if isinstance(enabled, list) and SERVER_NAME in enabled:
        enabled.remove(SERVER_NAME)
        if not enabled:
            del merged[ENABLED_KEY]
    return merged
