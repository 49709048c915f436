"""Credentials: pigeond's bearer token and address, as the daemon and its clients find
them, and the basic auth pigeond itself uses with opencode.

pigeond creates the token once (32 random bytes, URL-safe text, mode 0600)
and never logs it.  Clients (``pigeon-send``, ``pigeon``, the opencode plugin)
take it from ``PIGEOND_TOKEN``, else the file named by ``PIGEOND_TOKEN_FILE``,
else the default file beside the default database, so a send needs no flag.

Clients prefer the daemon's Unix socket in a folder only their user can
enter: a process of another user squatting on the TCP port while pigeond is
down cannot pose as the daemon to them.  Stdlib only: the CLIs must not load
Twisted's HTTP client stack.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pigeond.private_files import FILE_MODE, GROUP_OTHER_BITS, make_private_dirs

DEFAULT_URL = "http://127.0.0.1:4097"
SYSTEM_SOCKET = "/run/pigeond/pigeond.sock"
TOKEN_BYTES = 32
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{43,512}$")  # 32 random bytes are 43 URL-safe characters


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """opencode's HTTP basic auth (``OPENCODE_SERVER_USERNAME``/``_PASSWORD``)."""

    username: str
    password: str


class TokenError(Exception):
    """The token file is unusable; the text is one line naming the file."""


def default_state_dir(env: Mapping[str, str]) -> Path:
    """Where pigeond keeps its database (and token) unless told otherwise."""
    state_dirs = env.get("STATE_DIRECTORY")
    if state_dirs:
        return Path(state_dirs.split(":")[0])
    xdg = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local/state")
    return Path(xdg) / "pigeond"


def read_token(path: Path | str) -> str:
    """The token in ``path``; TokenError if it cannot be read or is not a token."""
    try:
        text = Path(path).read_text(encoding="ascii").strip()
    except FileNotFoundError as e:
        raise TokenError(f"token file {path} does not exist") from e
    except (OSError, UnicodeDecodeError) as e:
        raise TokenError(f"cannot read the token file {path}: {e}") from e
    if not TOKEN_RE.fullmatch(text):
        raise TokenError(
            f"token file {path} does not hold a token of at least {TOKEN_BYTES} random bytes;"
            " delete it and restart pigeond to make a new one"
        )
    return text


def load_or_create_token(path: Path | str) -> tuple[str, bool]:
    """The daemon's token, made at first start; returns it and whether the file was
    loosened (group or other could read it) and has been made private again."""
    target = Path(path)
    make_private_dirs(target.parent)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secrets.token_urlsafe(TOKEN_BYTES) + "\n")
            f.flush()
            os.fsync(f.fileno())
    st = target.stat()
    if not stat.S_ISREG(st.st_mode):
        raise TokenError(f"token file {target} is not a regular file")
    loosened = st.st_mode & GROUP_OTHER_BITS != 0
    if loosened:
        os.chmod(target, stat.S_IMODE(st.st_mode) & ~GROUP_OTHER_BITS)
    return read_token(target), loosened


def client_token(env: Mapping[str, str]) -> str | None:
    """``PIGEOND_TOKEN``, else ``PIGEOND_TOKEN_FILE`` (which must be readable), else the
    default file when it is there; None when there is none (a Unix socket needs none)."""
    token = env.get("PIGEOND_TOKEN", "").strip()
    if token:
        return token
    named = env.get("PIGEOND_TOKEN_FILE", "")
    if named:
        return read_token(named)
    default = default_state_dir(env) / "token"
    try:
        return read_token(default)
    except TokenError:
        return None


def _private_socket(path: Path, uid: int) -> bool:
    """A socket in a folder that only ``uid`` can enter, so nobody else can have put it there."""
    try:
        folder = os.stat(path.parent)
        sock = os.stat(path)
    except OSError:
        return False
    return (
        stat.S_ISSOCK(sock.st_mode)
        and folder.st_uid == uid
        and folder.st_mode & GROUP_OTHER_BITS == 0
    )


def _system_socket(path: Path) -> bool:
    """The system service's socket: in a folder only root or pigeond could have made."""
    try:
        folder = os.stat(path.parent)
        sock = os.stat(path)
    except OSError:
        return False
    return stat.S_ISSOCK(sock.st_mode) and folder.st_mode & 0o002 == 0


@dataclass(frozen=True, slots=True)
class DaemonAddress:
    url: str  # http://HOST:PORT[/prefix] or unix:/path
    why: str  # how it was chosen, for error messages


def daemon_address(
    given: str | None,
    env: Mapping[str, str],
    *,
    system_socket: str = SYSTEM_SOCKET,
    default_url: str = DEFAULT_URL,
) -> DaemonAddress:
    """``--url``, else ``PIGEOND_URL``, else the user's private Unix socket, else the
    system service's socket, else ``http://127.0.0.1:4097``."""
    if given:
        return DaemonAddress(given, "--url")
    if env.get("PIGEOND_URL"):
        return DaemonAddress(env["PIGEOND_URL"], "PIGEOND_URL")
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        user_socket = Path(runtime) / "pigeond" / "pigeond.sock"
        if _private_socket(user_socket, os.getuid()):
            return DaemonAddress(f"unix:{user_socket}", "the user's runtime socket")
    if _system_socket(Path(system_socket)):
        return DaemonAddress(f"unix:{system_socket}", "the system service's socket")
    return DaemonAddress(default_url, "the default address")
