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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pigeond.private_files import FILE_MODE, GROUP_OTHER_BITS, make_private_dirs

DEFAULT_URL = "http://127.0.0.1:4097"
SYSTEM_SOCKET = "/run/pigeond/pigeond.sock"
TOKEN_BYTES = 32
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{43,512}$")  # 32 random bytes are 43 URL-safe characters


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """opencode's HTTP basic auth (``OPENCODE_SERVER_USERNAME``/``_PASSWORD``).
    ``source`` names where the password came from, for the lines that show the auth
    (never the password itself)."""

    username: str
    password: str = field(repr=False)
    source: str = field(default="OPENCODE_SERVER_PASSWORD", compare=False)


class TokenError(Exception):
    """The token file is unusable; the text is one line naming the file."""


class PasswordFileError(Exception):
    """A password file (the database's, opencode's) is unusable; the text is one line
    naming the file."""


def read_password_file(path: Path | str, option: str = "db_password_file") -> str:
    """The password in ``path`` (the file ``option`` names: ``db_password_file``,
    ``opencode_password_file``): its first line, as written.

    Refused (PasswordFileError), like libpq's ``~/.pgpass``, when group or others may
    read or write it: a password another user can read is no longer one.  Never
    tightened in place (as pigeond's own token is): the file is the user's, not ours."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise PasswordFileError(f"{option} {path} is not a regular file")
            if st.st_mode & GROUP_OTHER_BITS:
                raise PasswordFileError(
                    f"{option} {path} is open to group or others (mode"
                    f" {stat.S_IMODE(st.st_mode):04o}): chmod 600 {path}"
                )
            raw = f.read(64 * 1024)
    except FileNotFoundError as e:
        raise PasswordFileError(f"{option} {path} does not exist") from e
    except OSError as e:
        raise PasswordFileError(f"cannot read {option} {path}: {e.strerror or e}") from e
    try:
        password = raw.decode("utf-8").splitlines()[0] if raw.strip() else ""
    except UnicodeDecodeError as e:
        raise PasswordFileError(f"{option} {path} is not UTF-8 text") from e
    if not password:
        raise PasswordFileError(f"{option} {path} is empty (the password is its first line)")
    return password


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


def _from_variable(env: Mapping[str, str], system_socket: str, default_url: str) -> str | None:
    return env.get("PIGEOND_URL") or None


def _user_socket(env: Mapping[str, str], system_socket: str, default_url: str) -> str | None:
    runtime = env.get("XDG_RUNTIME_DIR")
    if not runtime:
        return None
    path = Path(runtime) / "pigeond" / "pigeond.sock"
    return f"unix:{path}" if _private_socket(path, os.getuid()) else None


def _service_socket(env: Mapping[str, str], system_socket: str, default_url: str) -> str | None:
    return f"unix:{system_socket}" if _system_socket(Path(system_socket)) else None


def _default(env: Mapping[str, str], system_socket: str, default_url: str) -> str | None:
    return default_url


@dataclass(frozen=True, slots=True)
class AddressSource:
    """One place a client looks for the daemon when no ``--url`` is given."""

    said: str  # in help texts, after "default: " or "else "
    why: str  # DaemonAddress.why
    find: Callable[[Mapping[str, str], str, str], str | None]


# Where every client (pigeon-send, pigeon, pigeon-tui, and the opencode plugin, whose
# discoverSocket() keeps the same order) looks for the daemon, first to last:
# daemon_address() walks it, and the help texts say it (address_order()).
ADDRESS_SOURCES: tuple[AddressSource, ...] = (
    AddressSource("$PIGEOND_URL", "PIGEOND_URL", _from_variable),
    AddressSource(
        "the user's socket $XDG_RUNTIME_DIR/pigeond/pigeond.sock when its folder is the"
        " user's alone",
        "the user's runtime socket",
        _user_socket,
    ),
    AddressSource(
        f"the system service's socket {SYSTEM_SOCKET} when it is there",
        "the system service's socket",
        _service_socket,
    ),
    AddressSource(DEFAULT_URL, "the default address", _default),
)


def address_order() -> str:
    """Where a client looks for the daemon, in words, in the order it looks."""
    return ", else ".join(source.said for source in ADDRESS_SOURCES)


def daemon_address(
    given: str | None,
    env: Mapping[str, str],
    *,
    system_socket: str = SYSTEM_SOCKET,
    default_url: str = DEFAULT_URL,
) -> DaemonAddress:
    """``--url``, else the first of :data:`ADDRESS_SOURCES` that has an address."""
    if given:
        return DaemonAddress(given, "--url")
    found = ((s.find(env, system_socket, default_url), s.why) for s in ADDRESS_SOURCES)
    # the last source, the default URL, always has one
    return next(DaemonAddress(url, why) for url, why in found if url)
