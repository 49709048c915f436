"""``pigeon install-claude``: register pigeond with Claude Code, for one project or the user.

What it writes (measured with Claude Code 2.1.332, which loads these in ``claude -p`` and
the interactive TUI alike):

- the MCP server ``pigeon`` (``pigeon-mcp``, by the absolute path of the installed script);
- the hooks SessionStart, UserPromptSubmit and Stop, each ``pigeon-hook <event>`` by its
  absolute path (:data:`pigeond.agents.claude_hook.EVENTS`);
- the skill ``swarm-messaging`` (pigeond/agents/skill/), which Claude Code lists to the
  model and reads when it is about to use the swarm.

``--project DIR``: the server in ``DIR/.mcp.json`` (Claude Code's project servers, found
from DIR and any folder below it; shared with the project, so written 0644 when new), the
hooks and ``"enabledMcpjsonServers": ["pigeon"]`` (which approves that server, so the TUI
does not ask) in ``DIR/.claude/settings.local.json`` (the person's own settings for the
project: the absolute paths are this installation's), the skill in
``DIR/.claude/skills/``.  Claude Code reads the project's settings for sessions started in
DIR itself, not in a folder below it.  ``--user`` (the default): the server in
``~/.claude.json``'s ``mcpServers``, the hooks in ``~/.claude/settings.json``, the skill in
``~/.claude/skills/`` (``$CLAUDE_CONFIG_DIR`` for ``~/.claude`` and the folder of
``.claude.json`` when set, as Claude Code does).

Settings are merged (:mod:`pigeond.cli.claude_settings`): a person's own hooks, servers and
keys are never dropped or reordered, a re-install changes nothing, ``--uninstall`` removes
exactly ours.  Every file is read and checked before any is written: a malformed one
stops the install with one line and leaves every file as it was.  Writes are atomic
(a temporary file renamed over the old one, through a symbolic link to its target);
a file that exists keeps its mode, a new one is 0600 unless it is the project's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pigeond.agents.claude_hook import EVENTS
from pigeond.cli import claude_settings as cs
from pigeond.cli.atomic_file import replace_file
from pigeond.cli.install_plugin import SKILL_NAME, InstallError, bundled_skill

SKILL_FILE = "SKILL.md"
# Claude Code's hook event → pigeon-hook's command
HOOK_EVENTS = {event.hook: command for command, event in EVENTS.items()}
PRIVATE, SHARED = 0o600, 0o644


@dataclass(frozen=True, slots=True)
class Scope:
    """Where one scope's three parts go."""

    servers: Path  # the file whose "mcpServers" gets the server
    settings: Path  # the settings file that gets the hooks
    skills: Path  # the skills folder
    project: bool
    servers_mode: int  # a new servers file's mode


def project_scope(project: str) -> Scope:
    root = Path(project).expanduser()
    if not root.is_dir():
        raise InstallError(f"--project {project}: no such directory")
    root = root.resolve()
    claude = root / ".claude"
    return Scope(
        root / ".mcp.json", claude / "settings.local.json", claude / "skills", True, SHARED
    )


def user_scope(env: Mapping[str, str]) -> Scope:
    configured = env.get("CLAUDE_CONFIG_DIR", "")
    home = env.get("HOME", "")
    if configured:
        if not os.path.isabs(configured):
            raise InstallError(f"$CLAUDE_CONFIG_DIR is not an absolute path: {configured!r}")
        config, state = Path(configured), Path(configured) / ".claude.json"
    elif home and os.path.isabs(home):
        config, state = Path(home) / ".claude", Path(home) / ".claude.json"
    else:
        raise InstallError("neither $CLAUDE_CONFIG_DIR nor $HOME is an absolute path")
    return Scope(state, config / "settings.json", config / "skills", False, PRIVATE)


@dataclass(frozen=True, slots=True)
class Programs:
    """The absolute paths of the installed scripts the settings name."""

    hook: str
    mcp: str


def find_programs(argv0: str, env: Mapping[str, str]) -> Programs:
    """``pigeon-hook`` and ``pigeon-mcp`` beside the running ``pigeon`` (the package's
    scripts are installed together), else on PATH."""
    beside = Path(os.path.abspath(argv0)).parent
    found = []
    for name in (cs.HOOK_PROGRAM, cs.SERVER_PROGRAM):
        candidate = beside / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            found.append(str(candidate))
            continue
        on_path = shutil.which(name, path=env.get("PATH"))
        if on_path is None:
            raise InstallError(f"{name} is installed neither beside pigeon ({beside}) nor on PATH")
        found.append(os.path.abspath(on_path))
    return Programs(*found)


@dataclass(frozen=True, slots=True)
class Change:
    """One file's new content (None: delete it), and its mode if it is new."""

    path: Path
    content: bytes | None
    mode: int
    said: str


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _settings(path: Path) -> dict[str, Any]:
    raw = _read(path)
    if raw is None:
        return {}
    try:
        return cs.parse(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise cs.SettingsError(f"{path}: not UTF-8 text") from e
    except cs.SettingsError as e:
        raise cs.SettingsError(f"{path}: {e}") from e


def _json_change(path: Path, new: dict[str, Any], mode: int, deletable: bool) -> Change | None:
    before = _read(path)
    if before is not None and cs.parse(before.decode("utf-8")) == new:
        return None
    if before is None and not new:
        return None
    if before is not None and not new and deletable:
        return Change(path, None, mode, "removed")
    said = "installed into" if before is None else "updated"
    return Change(path, cs.render(new).encode("utf-8"), mode, said)


def plan(scope: Scope, programs: Programs | None) -> list[Change]:
    """The files to write for an install (``programs``) or an uninstall (None)."""
    servers, settings = _settings(scope.servers), _settings(scope.settings)
    try:
        if programs is None:
            servers = cs.without_server(servers)
        else:
            servers = cs.with_server(servers, programs.mcp)
    except cs.SettingsError as e:
        raise cs.SettingsError(f"{scope.servers}: {e}") from e
    try:
        if programs is None:
            settings = cs.without_enabled(cs.without_hooks(settings, HOOK_EVENTS))
        else:
            settings = cs.with_hooks(settings, programs.hook, HOOK_EVENTS)
            settings = cs.with_enabled(settings) if scope.project else settings
    except cs.SettingsError as e:
        raise cs.SettingsError(f"{scope.settings}: {e}") from e
    # the project's own files are removed when nothing is left in them; the user's stay
    changes = [
        _json_change(scope.servers, servers, scope.servers_mode, scope.project),
        _json_change(scope.settings, settings, PRIVATE, scope.project),
        _skill_change(scope.skills / SKILL_NAME / SKILL_FILE, programs is not None),
    ]
    return [change for change in changes if change is not None]


def _skill_change(path: Path, install: bool) -> Change | None:
    before = _read(path)
    if install:
        skill = bundled_skill()
        if before == skill:
            return None
        return Change(path, skill, SHARED, "installed into" if before is None else "updated")
    ours = before is not None and before.startswith(f"---\nname: {SKILL_NAME}\n".encode())
    return Change(path, None, SHARED, "removed") if ours else None


def apply(change: Change) -> None:
    target = Path(os.path.realpath(change.path))
    if change.content is None:
        target.unlink()
        with contextlib.suppress(OSError):  # the skill's folder, when it is left empty
            if change.path.name == SKILL_FILE:
                target.parent.rmdir()
        return
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = change.mode
    replace_file(target, change.content, mode)


def run(
    project: str | None, uninstall: bool, env: Mapping[str, str], programs: Programs | None = None
) -> int:
    """Install (or uninstall) into ``project``, else the user's scope; print each file done.

    InstallError for a destination that cannot be used; 1 when a file is malformed or a
    write failed (nothing written for a malformed file)."""
    scope = user_scope(env) if project is None else project_scope(project)
    if not uninstall and programs is None:
        programs = find_programs(sys.argv[0], env)
    try:
        changes = plan(scope, None if uninstall else programs)
    except cs.SettingsError as e:
        print(f"pigeon: cannot merge into {e}; nothing was changed", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"pigeon: cannot read Claude Code's settings: {e}", file=sys.stderr)
        return 1
    for change in changes:
        try:
            apply(change)
        except OSError as e:
            print(f"pigeon: cannot write {change.path}: {e.strerror or e}", file=sys.stderr)
            return 1
        print(f"{change.said}: {change.path}")
    if not changes:
        print("already " + ("uninstalled" if uninstall else "up to date"))
    elif not uninstall:
        print(
            "Claude Code loads them when a session starts"
            + (f" in {scope.servers.parent}" if scope.project else "")
            + "; let the tools run without asking with --allowedTools mcp__pigeon (or /permissions)"
        )
    return 0
