"""``pigeon install-plugin``: put the opencode plugin where opencode loads it.

opencode 1.x loads ``plugin/*.js`` and ``plugins/*.js`` from its global config folder
(``$XDG_CONFIG_HOME/opencode``, else ``~/.config/opencode``) for every
session, and from ``.opencode/plugin`` in a project (or any folder above it)
for that project's sessions; opencode 2.x loads ``plugins/*.js`` of the same folders
(its documentation), and only a plugin of its own shape.  pigeond ships one plugin for
each (:mod:`pigeond.plugin_bundles`) and installs the one for the opencode it finds
(:mod:`pigeond.cli.opencode_version`), under the same file name, so that a later install
for the other version replaces it.  The plugins ship inside the Python package, so
``pigeon`` installs the copy that matches the daemon it came with.  Beside it goes the
swarm-messaging skill (``skill/swarm-messaging/SKILL.md`` in the same folder), which
opencode 1.15 and 1.18 list to the model (checked with the real binaries).
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from pigeond.cli.atomic_file import replace_file
from pigeond.cli.opencode_version import opencode_major
from pigeond.credentials import address_order

SKILL_NAME = "swarm-messaging"

PLUGIN_FILE = "pigeond-swarm.js"
# what the package ships for each opencode major version (installed as PLUGIN_FILE)
SHIPPED = {1: PLUGIN_FILE, 2: "pigeond-swarm-v2.js"}
# the folder each version loads the plugin from: 1.x reads plugin/ and plugins/, 2.x plugins/
FOLDER = {1: "plugin", 2: "plugins"}
# The plugin looks for pigeond as pigeon-send does (its daemonConfig and discoverSocket),
# with opencode's environment and user.
TOOLS_REACH = f"its tools reach pigeond at {address_order()}, as opencode's environment has them"
# opencode reads both folder names; a second copy would register every tool twice.
_OTHER_FOLDER = {"plugin": "plugins", "plugins": "plugin"}


class InstallError(ValueError):
    """The destination cannot be used (a usage error, not a failed write)."""


class Outcome(enum.Enum):
    INSTALLED = "installed"
    UPDATED = "updated"
    UNCHANGED = "already up to date"


@dataclass(frozen=True, slots=True)
class Installed:
    path: Path
    outcome: Outcome
    other_copy: Path | None
    """A copy of the plugin in opencode's other plugin folder, which it would load too."""


def bundled_skill() -> bytes:
    """The swarm-messaging skill (pigeond/agents/skill/), for opencode and Claude Code."""
    return (files("pigeond") / "agents" / "skill" / SKILL_NAME / "SKILL.md").read_bytes()


def bundled_plugin(major: int = 1) -> bytes:
    """The plugin for opencode ``major``.x as this installation of pigeond ships it."""
    return (files("pigeond") / "opencode-plugin" / SHIPPED[major]).read_bytes()


def global_plugin_dir(env: Mapping[str, str]) -> Path:
    """opencode 1.x's global plugin folder for this user."""
    config = env.get("XDG_CONFIG_HOME", "")
    if config and os.path.isabs(config):
        return Path(config) / "opencode" / "plugin"
    home = env.get("HOME", "")
    if not home or not os.path.isabs(home):
        raise InstallError("neither $XDG_CONFIG_HOME nor $HOME is an absolute path")
    return Path(home) / ".config" / "opencode" / "plugin"


def project_plugin_dir(project: str) -> Path:
    """The 1.x plugin folder of one project (its sessions, and those of folders below it)."""
    root = Path(project).expanduser()
    if not root.is_dir():
        raise InstallError(f"--project {project}: no such directory")
    return root.resolve() / ".opencode" / "plugin"


def install(folder: Path, source: bytes | None = None, major: int = 1) -> Installed:
    """Write the plugin into ``folder`` atomically (a reader never sees half a file)."""
    source = bundled_plugin(major) if source is None else source
    target = folder / PLUGIN_FILE
    # only 1.x reads both folders; 2.x never loads a copy in plugin/
    other = folder.parent / _OTHER_FOLDER[folder.name] / PLUGIN_FILE
    other_copy = other if major == 1 and other.exists() else None
    return Installed(target, write_file(target, source), other_copy)


def skill_path(plugin_folder: Path) -> Path:
    """Where opencode (1.15 and 1.18 alike) finds the skill beside the plugin folder:
    ``skill/<name>/SKILL.md`` in the same config folder (``.opencode``, or opencode's
    global one); it lists it to the model, and its ``skill`` tool reads it."""
    return plugin_folder.parent / "skill" / SKILL_NAME / "SKILL.md"


def write_file(target: Path, source: bytes) -> Outcome:
    """Write ``source`` to ``target`` atomically, mode 0644, unless it is there already."""
    try:
        current: bytes | None = target.read_bytes()
    except FileNotFoundError:
        current = None
    if current == source:
        return Outcome.UNCHANGED
    replace_file(target, source, 0o644)
    return Outcome.INSTALLED if current is None else Outcome.UPDATED


def run(project: str | None, env: Mapping[str, str], opencode_version: int | None = None) -> int:
    """Install the plugin for ``opencode_version`` (else the installed opencode's) into
    ``project``'s folder, or the global one; print what was done.

    InstallError for a destination that cannot be used; 1 when writing failed.
    """
    # a destination that cannot be used is a usage error before opencode is asked
    first = global_plugin_dir(env) if project is None else project_plugin_dir(project)
    found = opencode_major(opencode_version, env)
    major = found.major
    folder = first.parent / FOLDER[major]
    try:
        done = install(folder, major=major)
    except OSError as e:
        print(
            f"pigeon: cannot install the plugin into {folder}: {e.strerror or e}", file=sys.stderr
        )
        return 1
    print(f"{done.outcome.value}: {done.path}")
    if done.outcome is not Outcome.UNCHANGED:
        print(f"(the plugin for opencode {major}.x: {found.why})")
    skill = skill_path(folder)
    try:
        skill_outcome = write_file(skill, bundled_skill())
    except OSError as e:
        print(f"pigeon: cannot install the skill into {skill.parent}: {e.strerror or e}",
              file=sys.stderr)  # fmt: skip
        return 1
    print(f"{skill_outcome.value}: {skill}")
    if done.other_copy is not None:
        print(
            f"pigeon: opencode also loads {done.other_copy}: remove it, or every swarm tool"
            " is registered twice",
            file=sys.stderr,
        )
    if (done.outcome, skill_outcome) != (Outcome.UNCHANGED, Outcome.UNCHANGED):
        print(f"opencode loads it when it next starts; {TOOLS_REACH}")
    return 0
