"""Who may make pigeond prompt an agent: one gate every request passes before routing.

Every accepted message becomes a prompt in a session that runs shell commands
as its user, so the gate refuses, in this order:

0. any header the gate decides on (``Host``, ``Origin``, ``Authorization``,
   ``Content-Type``) given more than once (400): Twisted reads the last of them, so a
   second ``Host`` or ``Authorization`` would otherwise override the first that a proxy
   or a log saw;
1. a ``Host`` that is not a loopback address, ``localhost`` or in ``allow_hosts``
   (421): a DNS-rebound web page names its own host;
2. any ``Origin`` not in ``allow_origins`` (403): only browsers send one;
3. a Unix-socket peer whose uid (``SO_PEERCRED``) is not pigeond's own, in
   ``allow_uids``, or a member of ``allow_group`` (403); an allowed Unix peer
   needs no token;
4. over TCP with ``auth = "token"``, any route but ``GET /health`` without
   ``Authorization: Bearer <token>`` (401), compared in constant time;
5. a ``POST`` (or ``PUT``) whose body is not ``application/json`` (415): a web page can
   send ``text/plain`` cross-site without a preflight.
"""

from __future__ import annotations

import functools
import grp
import hmac
import ipaddress
import pwd
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from twisted.internet.address import UNIXAddress
from twisted.web import server

from pigeond.api.web import HttpError
from pigeond.config import Config

HEALTH_PATH = b"/health"
JSON_MEDIA_TYPE = "application/json"
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux >= 4.13
MAX_PEER_GROUPS = 4096
# The headers the gate decides on, as they are named in its answers: each may come once.
GATED_HEADERS = ("Host", "Origin", "Authorization", "Content-Type")
GATED_HEADER_KEYS = tuple((name.lower().encode("ascii"), name) for name in GATED_HEADERS)


@dataclass(frozen=True, slots=True)
class Peer:
    """A Unix-socket client as the kernel saw it when it connected."""

    uid: int
    gid: int
    groups: frozenset[int] | None  # supplementary groups, when the kernel tells them
    pid: int = 0  # 0 when the kernel could not name it (a peer in another pid namespace)


def peer_credentials(sock: socket.socket) -> Peer:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    groups: frozenset[int] | None
    try:
        data = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 4 * MAX_PEER_GROUPS)
    except OSError:
        groups = None
    else:
        groups = frozenset(struct.unpack(f"{len(data) // 4}I", data[: len(data) // 4 * 4]))
    return Peer(uid, gid, groups, pid)


def unix_peer(request: server.Request) -> Peer | None:
    """The peer of a request that came over a Unix socket; None for TCP."""
    if not isinstance(request.getHost(), UNIXAddress):
        return None
    transport = request.transport
    handle = transport.getHandle() if transport is not None else None  # type: ignore[attr-defined]
    if not isinstance(handle, socket.socket):
        raise HttpError(403, "cannot tell who is connected on this Unix socket")
    return peer_credentials(handle)


def gated_headers(request: server.Request) -> list[str | None]:
    """The headers the gate decides on, in :data:`GATED_HEADERS`' order (None: absent),
    each looked up once; 400 when one comes more than once (a browser never sends two; a
    client that does is trying which one wins)."""
    headers = request.requestHeaders
    found: list[str | None] = []
    for key, name in GATED_HEADER_KEYS:
        values = headers.getRawHeaders(key)
        if values is None:
            found.append(None)
        elif len(values) > 1:
            raise HttpError(400, f"the request has more than one {name} header")
        else:
            found.append(values[0].decode("latin-1"))
    return found


def host_name(header: str) -> str:
    """``Host`` without its port, lower case, brackets of an IPv6 literal removed."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


@functools.lru_cache(maxsize=64)
def is_loopback_name(name: str) -> bool:
    """Whether ``name`` is localhost or a loopback address.  Remembered for the few names
    clients use, since parsing an address on every request costs more than the rest of the
    Host check; bounded, so a client inventing names only churns the cache."""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def group_members(group: str) -> tuple[int, frozenset[str]]:
    """The gid and the listed member names of ``group``; KeyError when there is none."""
    entry = grp.getgrnam(group)
    return entry.gr_gid, frozenset(entry.gr_mem)


class AccessPolicy:
    """The gate; :meth:`configure` applies a reload's allow lists live."""

    def __init__(
        self,
        *,
        own_uid: int,
        token: str | None,
        allow_uids: Iterable[str] = (),
        allow_group: str = "",
        allow_origins: Iterable[str] = (),
        allow_hosts: Iterable[str] = (),
    ) -> None:
        self.own_uid = own_uid
        self._token = token.encode("ascii") if token is not None else None
        self.set_allowed(allow_uids, allow_group, allow_origins, allow_hosts)

    def configure(self, config: Config) -> None:
        """A reload's allow lists (see :meth:`set_allowed`)."""
        self.set_allowed(
            config.allow_uids, config.allow_group, config.allow_origins, config.allow_hosts
        )

    def set_allowed(
        self,
        allow_uids: Iterable[str],
        allow_group: str,
        allow_origins: Iterable[str],
        allow_hosts: Iterable[str],
    ) -> None:
        self.allow_uids = frozenset(int(uid) for uid in allow_uids) | {self.own_uid}
        self.allow_group = allow_group
        self.allow_origins = frozenset(origin.rstrip("/").lower() for origin in allow_origins)
        self.allow_hosts = frozenset(host_name(h) for h in allow_hosts)

    def __call__(self, request: server.Request) -> None:
        host, origin, authorization, content_type = gated_headers(request)
        self._check_host(host)
        self._check_origin(origin)
        peer = unix_peer(request)
        if peer is not None:
            self._check_peer(peer)
        elif not self._public(request):
            self._check_token(authorization)
        if request.method in (b"POST", b"PUT"):
            self._check_content_type(content_type)

    def _check_host(self, raw: str | None) -> None:
        if raw is None:
            raise HttpError(421, "a Host header is required")
        name = host_name(raw)
        if not is_loopback_name(name) and name not in self.allow_hosts:
            raise HttpError(
                421, f"Host {name!r} is not this daemon's: use localhost or 127.0.0.1"
                " (or add it to allow_hosts)",
            )  # fmt: skip

    def _check_origin(self, origin: str | None) -> None:
        if origin is None:
            return
        if origin.strip().rstrip("/").lower() not in self.allow_origins:
            raise HttpError(
                403, "requests from web pages are refused (Origin not in allow_origins)"
            )

    def _check_peer(self, peer: Peer) -> None:
        if peer.uid in self.allow_uids or self._in_allowed_group(peer):
            return
        raise HttpError(
            403,
            f"uid {peer.uid} may not use this socket: only pigeond's own user, allow_uids"
            " and members of allow_group may send",
        )

    def _in_allowed_group(self, peer: Peer) -> bool:
        if not self.allow_group:
            return False
        try:
            gid, members = group_members(self.allow_group)
        except KeyError:
            return False
        if peer.gid == gid or (peer.groups is not None and gid in peer.groups):
            return True
        try:
            return pwd.getpwuid(peer.uid).pw_name in members
        except KeyError:
            return False

    def _public(self, request: server.Request) -> bool:
        """Reachable without a token: ``GET /health``, or every route with ``auth = none``."""
        if self._token is None:
            return True
        return request.path == HEALTH_PATH and request.method in (b"GET", b"HEAD")

    def _check_token(self, authorization: str | None) -> None:
        assert self._token is not None
        scheme, _, presented = (authorization or "").strip().partition(" ")
        given = presented.strip().encode("latin-1")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given, self._token):
            raise HttpError(
                401,
                "missing or wrong bearer token: send 'Authorization: Bearer <token>' with the"
                " token from pigeond's token file (or use its Unix socket)",
                headers={"WWW-Authenticate": 'Bearer realm="pigeond"'},
            )

    @staticmethod
    def _check_content_type(content_type: str | None) -> None:
        raw = content_type or ""
        media_type = raw.split(";", 1)[0].strip().lower()
        if media_type != JSON_MEDIA_TYPE:
            raise HttpError(
                415, f"the body must be sent as Content-Type: {JSON_MEDIA_TYPE}", {"got": raw}
            )
