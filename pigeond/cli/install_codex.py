"""``pigeon install-codex``: register pigeon-mcp with Codex in ``$CODEX_HOME/config.toml``.

Writes the table ``[mcp_servers.pigeon]`` (pigeon-mcp's absolute path, ``--as @NAME``
when a name is given, ``required = true`` so Codex waits for the server before the
first turn, ``default_tools_approval_mode = "approve"`` so ``codex exec`` may call the
tools) and merges it into the file: every other key, table and comment of the
person's config stays as it was, through install, re-install and ``--uninstall``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Table

from pigeond.cli.atomic_file import replace_file
from pigeond.model import NAME_RE
from pigeond.terminal import visible

SERVER = "pigeon"
# Codex starts an MCP server with a filtered environment: these pass through, so that
# pigeon-mcp finds pigeond as every client does (pigeond.credentials.ADDRESS_SOURCES,
# client_token) from what Codex's own environment has
PASSED_THROUGH = (
    "PIGEOND_URL", "PIGEOND_TOKEN", "PIGEOND_TOKEN_FILE", "PIGEOND_SEND_RETRY_S",
    "XDG_RUNTIME_DIR", "XDG_STATE_HOME",
)  # fmt: skip
EXECUTABLE = "pigeon-mcp"


class InstallError(ValueError):
    """A usage error: nothing was written."""


def config_path(env: Mapping[str, str]) -> Path:
    """``$CODEX_HOME/config.toml``, else ``~/.codex/config.toml``."""
    home = env.get("CODEX_HOME", "")
    if home:
        if not os.path.isabs(home):
            raise InstallError(f"CODEX_HOME={home} is not an absolute path")
        return Path(home) / "config.toml"
    user = env.get("HOME", "")
    if not user or not os.path.isabs(user):
        raise InstallError("neither $CODEX_HOME nor $HOME is an absolute path")
    return Path(user) / ".codex" / "config.toml"


def pigeon_mcp_path() -> str:
    """pigeon-mcp of the same installation as this pigeon (beside its interpreter, as in a
    virtualenv, or beside the pigeon script), else the one on PATH."""
    for folder in (Path(sys.executable).parent, Path(sys.argv[0]).resolve().parent):
        beside = folder / EXECUTABLE
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside.absolute())
    found = shutil.which(EXECUTABLE)
    if found is None:
        raise InstallError(f"{EXECUTABLE} is not installed beside pigeon nor on PATH")
    return str(Path(found).resolve())


def server_table(command: str, name: str | None) -> Table:
    table = tomlkit.table()
    table.add("command", command)
    table.add("args", ["--as", f"@{name}"] if name is not None else [])
    table.add("env_vars", list(PASSED_THROUGH))
    table.add("required", True)
    table.add("default_tools_approval_mode", "approve")
    return table


def merged(text: str, table: Table | None) -> str:
    """``text`` with ``[mcp_servers.pigeon]`` set to ``table`` (None: removed)."""
    document = tomlkit.parse(text)
    servers = document.get("mcp_servers")
    if servers is not None and not isinstance(servers, dict):
        raise InstallError("mcp_servers in the config is not a table")
    if table is None:
        if servers is not None and SERVER in servers:
            del servers[SERVER]
            if not servers:
                del document["mcp_servers"]
            # the blank line install put before the table goes with it
            shown = tomlkit.dumps(document)
            return shown[:-1] if shown.endswith("\n\n") and not text.endswith("\n\n") else shown
        return tomlkit.dumps(document)
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        document.add("mcp_servers", servers)
    servers[SERVER] = table
    return tomlkit.dumps(document)


def write_atomically(path: Path, text: str) -> None:
    """``text`` replaces ``path`` atomically, keeping its mode (0600 when new)."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    replace_file(path, text.encode("utf-8"), mode)


def run(name: str | None, uninstall: bool, env: Mapping[str, str]) -> int:
    """Install (or remove) the server table; InstallError for a usage error, 1 when the
    file cannot be read or written."""
    if name is not None:
        name = name.removeprefix("@")
        if not NAME_RE.fullmatch(name):
            raise InstallError(
                f"--as {name}: a name is lower-case letters, digits, '.', '_' or '-',"
                " starting with a letter or digit, at most 64"
            )
    if uninstall and name is not None:
        raise InstallError("--uninstall takes no --as")
    path = config_path(env)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as e:
        print(f"pigeon: cannot read {path}: {e}", file=sys.stderr)
        return 1
    command = "" if uninstall else pigeon_mcp_path()
    table = None if uninstall else server_table(command, name)
    try:
        new = merged(text, table)
    except TOMLKitError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InstallError(f"{path} is not valid TOML ({first}); nothing was changed") from e
    if new == text:
        print(
            f"already {'absent' if uninstall else 'up to date'}: [mcp_servers.{SERVER}] in {path}"
        )
        return 0
    try:
        write_atomically(path, new)
    except OSError as e:
        print(f"pigeon: cannot write {path}: {e.strerror or e}", file=sys.stderr)
        return 1
    if uninstall:
        print(f"removed [mcp_servers.{SERVER}] from {path}")
    else:
        who = (
            f"as @{name} (the member mcp_{name})"
            if name
            else "with no member name (sending needs 'from')"
        )
        print(
            f"installed [mcp_servers.{SERVER}] in {path}: Codex starts {visible(command)}"
            f" {who} when it next starts"
        )
    return 0
