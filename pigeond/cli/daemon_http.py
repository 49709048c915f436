"""How the CLIs talk to the daemon: one blocking HTTP request over TCP or a Unix socket,
the ``--url`` help they share, and what they say when a socket turns them away.

Blocking stdlib HTTP on purpose: a one-shot CLI needs no reactor.  Where a client looks
for the daemon is declared once, in :data:`pigeond.credentials.ADDRESS_SOURCES`; the
help text is made from it.
"""

from __future__ import annotations

import grp
import http.client
import json
import os
import pwd
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pigeond.credentials import ADDRESS_SOURCES, DaemonAddress, address_order

URL_HELP = f"the daemon's address, http://HOST:PORT or unix:PATH (default: {address_order()})"


class UsageError(ValueError):
    pass


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True, slots=True)
class DaemonAnswer:
    status: int
    body: dict[str, Any]
    retry_after_s: float | None = None

    @property
    def error(self) -> str:
        """The daemon's ``error``, or ``HTTP <status>`` when it gave none."""
        return str(self.body.get("error", "")) or f"HTTP {self.status}"


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (pigeond sends whole seconds); None when absent or odd."""
    if value is None or not value.strip().isdigit():
        return None
    return float(int(value.strip()))


def connection_for(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection and path prefix for ``http://host:port[/prefix]`` or ``unix:/path.sock``."""
    if url.startswith("unix:"):
        path = url[len("unix:") :]
        if not path:
            raise UsageError("a unix: URL needs a socket path, e.g. unix:/run/pigeond/pigeond.sock")
        return _UnixHTTPConnection(path, timeout), ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url must be http://HOST:PORT or unix:PATH, not {url!r}")
    try:
        port = parts.port
    except ValueError as e:
        raise UsageError(f"--url has a bad port: {url!r}") from e
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, port, timeout=timeout), parts.path.rstrip("/")


def call_daemon(
    url: str,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    timeout: float,
    token: str | None = None,
) -> DaemonAnswer:
    """One request; raises OSError (incl. timeouts) when the daemon cannot be reached: a
    ConnectionError when it refused or dropped the connection (closing it before any
    answer included), so a caller can tell that from a daemon that answered nonsense.
    The token goes only over TCP: a Unix socket's peer is known without one."""
    conn, prefix = connection_for(url, timeout)
    try:
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"accept": "application/json"}
        if data is not None:
            headers["content-type"] = "application/json"
        if token is not None and not url.startswith("unix:"):
            headers["authorization"] = f"Bearer {token}"
        conn.request(method, prefix + path, body=data, headers=headers)
        response = conn.getresponse()
        raw = response.read()
    except ConnectionError:
        raise  # http.client.RemoteDisconnected is one: closed without an answer
    except http.client.HTTPException as e:
        raise OSError(f"bad answer from the daemon: {e}") from e
    finally:
        conn.close()
    try:
        parsed = json.loads(raw.decode("utf-8")) if raw else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        parsed = {"error": raw.decode("utf-8", errors="replace").strip()[:300]}
    return DaemonAnswer(
        response.status,
        parsed if isinstance(parsed, dict) else {},
        retry_after(response.getheader("retry-after")),
    )


# -- a socket that turns the caller away -----------------------------------------------


def _name_of_group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _name_of_user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_fix(group: str, gid: int) -> str:
    """How the caller gets into ``group``: join it, or only log in again when /etc/group
    already lists them (this login started before they were added)."""
    if gid == os.getegid() or gid in os.getgroups():
        return f"you are in group {group}, yet it was refused (a security policy?)"
    user = _name_of_user(os.getuid())
    try:
        listed = user in grp.getgrgid(gid).gr_mem
    except KeyError:
        listed = False
    if listed:
        return (
            f"you were added to group {group} after this login began: log in again"
            f" (or run: newgrp {group})"
        )
    return f"you are not in group {group}: join it (sudo adduser {user} {group}) and log in again"


def socket_refusal(path: str) -> str:
    """One line on why connecting to the Unix socket ``path`` was refused (EACCES or
    EPERM): whose it is, and what the caller can do about it."""
    try:
        sock = os.stat(path)
    except PermissionError:
        return _closed_folder(path)
    except OSError as e:
        return f"{path}: cannot connect: {e.strerror}"
    return _not_open(
        f"{path} exists but is not open to you",
        sock,
        stat.S_IWGRP,
        "only its owner may use it; is it another user's pigeond?",
    )


def _closed_folder(path: str) -> str:
    """:func:`socket_refusal` for a socket whose folder the caller may not enter."""
    folder = Path(path).parent
    try:
        info = os.stat(folder)
    except OSError as e:
        return f"{path}: cannot connect: {e.strerror}"
    return _not_open(
        f"{path}: its folder {folder} is not open to you",
        info,
        stat.S_IXGRP,
        "only its owner may use it",
    )


def _not_open(what: str, info: os.stat_result, group_bit: int, owner_only: str) -> str:
    """``what (whose it is): what to do``: the group's way in when ``group_bit`` (the bit
    that would let the caller in) is open to the group, else ``owner_only``."""
    fix = owner_only
    if stat.S_IMODE(info.st_mode) & group_bit:
        fix = _group_fix(_name_of_group(info.st_gid), info.st_gid)
    return f"{what} ({_whose(info)}): {fix}"


def _whose(info: os.stat_result) -> str:
    """``owner O, group G, mode 0660`` of a file or folder."""
    return (
        f"owner {_name_of_user(info.st_uid)}, group {_name_of_group(info.st_gid)},"
        f" mode {stat.S_IMODE(info.st_mode):04o}"
    )


def closed_system_socket(address: DaemonAddress, system_socket: str) -> str | None:
    """When the default TCP address was used because the system service's socket is
    there but the caller may not even look at it (its folder is the service's group's):
    :func:`socket_refusal` for it; else None."""
    if address.why != ADDRESS_SOURCES[-1].why:  # not the last resort, the TCP address
        return None
    try:
        os.stat(system_socket)
    except PermissionError:
        return _closed_folder(system_socket)
    except OSError:
        return None
    return None


def unreachable_line(address: DaemonAddress, error: OSError, system_socket: str) -> str:
    """The one line for a daemon that could not be reached at ``address`` (no prefix)."""
    if isinstance(error, PermissionError) and address.url.startswith("unix:"):
        return socket_refusal(address.url[len("unix:") :])
    plain = f"daemon at {address.url} unreachable: {error}"
    closed = closed_system_socket(address, system_socket)
    return plain if closed is None else f"{closed} (and {plain})"


def turned_away_line(
    address: DaemonAddress, answer: DaemonAnswer, system_socket: str
) -> str | None:
    """For a 401 or 403 at the default TCP address while the system service's socket is
    closed to the caller: the line that says so (no prefix); else None."""
    if answer.status not in (401, 403):
        return None
    closed = closed_system_socket(address, system_socket)
    if closed is None:
        return None
    return f"{closed} (and {address.url} answered {answer.status}: {answer.error})"
