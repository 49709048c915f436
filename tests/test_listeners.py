"""Where pigeond listens: private ``unix:`` sockets, passed Unix sockets adopted as they are,
and the runtime socket with its folder checks (pigeond.service.listeners, and the daemon
using it)."""

from __future__ import annotations

import grp
import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor as global_reactor
from twisted.internet import threads, unix
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import AdoptedStreamServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Factory, Protocol
from twisted.web.resource import Resource
from twisted.web.server import Site

from pigeond.service.listeners import (
    UnixSocketPort,
    adopt_unix_as_is,
    listen_runtime_socket,
    server_endpoint,
    with_default_mode,
)
from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.polling import PATIENCE_S, wait_until
from tests.unix_http import unix_get

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="giving a folder to another uid needs root")


class Hello(Resource):
    isLeaf = True

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def render_GET(self, request: Any) -> bytes:
        return b"hello"


def site() -> Site:
    return Site(Hello())


async def get_async(path: str | Path, target: str = "/") -> bytes:
    answer: bytes = await threads.deferToThread(unix_get, path, target, PATIENCE_S)
    return answer


async def stop(port: IListeningPort) -> None:
    stopped = port.stopListening()
    if stopped is not None:
        await stopped


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def listening_unix_socket(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    return sock


def stale_socket(path: Path) -> None:
    """A socket file nobody listens on, as a crash leaves it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()


def runtime(tmp_path: Path, allow_group: str = "") -> UnixSocketPort | None:
    path = tmp_path / "run" / "pigeond.sock"
    return listen_runtime_socket(global_reactor, site(), str(path), allow_group)


def some_other_group() -> grp.struct_group:
    """A group that exists and is not our own primary group (nogroup on Debian)."""
    own = os.getegid()
    for group in grp.getgrall():
        if group.gr_gid != own:
            return group
    pytest.fail("this machine has no group besides our own")


# -- the listen endpoint -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("unix:/run/p.sock", "unix:/run/p.sock:mode=600"),
        ("unix:/run/p.sock:lockfile=0", "unix:/run/p.sock:lockfile=0:mode=600"),
        ("unix:address=/run/p.sock", "unix:address=/run/p.sock:mode=600"),
        ("unix:/run/p.sock:mode=660", "unix:/run/p.sock:mode=660"),
        ("unix:/run/mode\\=1.sock", "unix:/run/mode\\=1.sock:mode=600"),
        ("tcp:4097:interface=127.0.0.1", "tcp:4097:interface=127.0.0.1"),
        ("systemd:domain=UNIX:index=0", "systemd:domain=UNIX:index=0"),
    ],
)
def test_mode_600_is_added_only_to_unix_endpoints_without_one(listen: str, expected: str) -> None:
    """``:mode=600`` is appended to a ``unix:`` endpoint that sets no mode, nothing else."""
    assert with_default_mode(listen) == expected


@pytest_twisted.ensureDeferred
async def test_unix_listen_without_mode_is_private(tmp_path: Path) -> None:
    """``unix:PATH`` makes a socket file mode 0600, not Twisted's 0666."""
    path = tmp_path / "p.sock"
    port = await server_endpoint(global_reactor, f"unix:{path}").listen(site())
    try:
        assert mode(path) == 0o600
    finally:
        await stop(port)


@pytest_twisted.ensureDeferred
async def test_unix_listen_with_mode_keeps_it(tmp_path: Path) -> None:
    """``unix:PATH:mode=660`` makes a socket file mode 0660."""
    path = tmp_path / "p.sock"
    port = await server_endpoint(global_reactor, f"unix:{path}:mode=660").listen(site())
    try:
        assert mode(path) == 0o660
    finally:
        await stop(port)


# -- a passed Unix socket ------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_adopted_unix_socket_keeps_its_mode_and_file(tmp_path: Path) -> None:
    """A passed Unix socket (mode 0640) is served without a chmod, and its file is still
    there after the port stops."""
    path = tmp_path / "activated.sock"
    listener = listening_unix_socket(path)
    os.chmod(path, 0o640)
    fd = os.dup(listener.fileno())  # what systemd passes as fd 3
    endpoint = adopt_unix_as_is(
        global_reactor, AdoptedStreamServerEndpoint(None, fd, socket.AF_UNIX)
    )
    port = await endpoint.listen(site())
    try:
        assert (await get_async(path)).endswith(b"hello")
        assert mode(path) == 0o640
    finally:
        await stop(port)
        listener.close()
    assert stat.S_ISSOCK(os.lstat(path).st_mode) and mode(path) == 0o640
    with pytest.raises(OSError):
        os.fstat(fd)  # the passed descriptor was closed; the port used a duplicate


@pytest_twisted.ensureDeferred
async def test_adopted_unix_socket_still_listens_for_systemd_after_stop(tmp_path: Path) -> None:
    """Stopping the port closes pigeond's copy without shutdown(): the socket systemd holds
    keeps listening (a shutdown made systemd fail the .socket unit with POLLHUP)."""
    path = tmp_path / "activated.sock"
    systemd_copy = listening_unix_socket(path)
    fd = os.dup(systemd_copy.fileno())
    endpoint = adopt_unix_as_is(
        global_reactor, AdoptedStreamServerEndpoint(None, fd, socket.AF_UNIX)
    )
    await stop(await endpoint.listen(site()))
    try:
        assert systemd_copy.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))  # waits in the backlog for the next pigeond
            systemd_copy.settimeout(5)
            accepted, _ = systemd_copy.accept()
            accepted.close()
    finally:
        systemd_copy.close()


def test_adopted_inet_socket_stays_twisteds() -> None:
    """An adopted INET socket is left to Twisted: the same endpoint comes back."""
    endpoint = AdoptedStreamServerEndpoint(global_reactor, 3, socket.AF_INET)
    assert adopt_unix_as_is(global_reactor, endpoint) is endpoint


@pytest_twisted.ensureDeferred
async def test_adopting_a_socket_that_does_not_listen_fails_clearly(tmp_path: Path) -> None:
    """A passed Unix socket that is bound but not listening is refused, saying so."""
    unbound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unbound.bind(str(tmp_path / "idle.sock"))
    endpoint = adopt_unix_as_is(
        global_reactor, AdoptedStreamServerEndpoint(None, unbound.fileno(), socket.AF_UNIX)
    )
    try:
        with pytest.raises(ValueError, match="not listening"):
            await endpoint.listen(site())
    finally:
        unbound.close()


@pytest_twisted.ensureDeferred
async def test_connections_are_unix_server_transports_with_the_socket(tmp_path: Path) -> None:
    """Accepted connections are twisted unix.Server transports whose getHandle() is the
    connected socket, so SO_PEERCRED names the client."""
    connected: Deferred[Any] = Deferred()

    class Record(Protocol):
        def connectionMade(self) -> None:
            connected.callback(self.transport)

    port = listen_runtime_socket(
        global_reactor, Factory.forProtocol(Record), str(tmp_path / "run" / "pigeond.sock")
    )
    assert port is not None
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(str(tmp_path / "run" / "pigeond.sock"))
        transport = await connected
        assert isinstance(transport, unix.Server)
        creds = transport.getHandle().getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        assert int.from_bytes(creds[4:8], "little") == os.getuid()
    finally:
        client.close()
        await stop(port)


# -- the runtime socket --------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_runtime_socket_is_private_in_a_private_folder(tmp_path: Path) -> None:
    """The runtime socket's folder is made 0700, the socket 0600, and it serves."""
    port = runtime(tmp_path)
    assert port is not None
    try:
        assert mode(tmp_path / "run") == 0o700
        assert mode(tmp_path / "run" / "pigeond.sock") == 0o600
        assert (await get_async(tmp_path / "run" / "pigeond.sock")).endswith(b"hello")
    finally:
        await stop(port)


@pytest_twisted.ensureDeferred
async def test_runtime_socket_with_allow_group_is_0660_for_that_group(tmp_path: Path) -> None:
    """With allow_group the folder is 0750 and the socket 0660, both of that group."""
    group = some_other_group()
    port = runtime(tmp_path, group.gr_name)
    assert port is not None
    try:
        folder = os.lstat(tmp_path / "run")
        sock = os.lstat(tmp_path / "run" / "pigeond.sock")
        assert (stat.S_IMODE(folder.st_mode), folder.st_gid) == (0o750, group.gr_gid)
        assert (stat.S_IMODE(sock.st_mode), sock.st_gid) == (0o660, group.gr_gid)
    finally:
        await stop(port)


@pytest_twisted.ensureDeferred
async def test_allow_group_that_is_our_own_needs_no_chown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With allow_group = pigeond's own group (the unit's Group=) the socket is 0660 without
    a chown, which the unit's system call filter would refuse."""

    def refused(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "chown", refused)
    port = runtime(tmp_path, grp.getgrgid(os.getegid()).gr_name)
    assert port is not None
    try:
        sock = os.lstat(tmp_path / "run" / "pigeond.sock")
        assert (stat.S_IMODE(sock.st_mode), sock.st_gid) == (0o660, os.getegid())
        assert mode(tmp_path / "run") == 0o750
    finally:
        await stop(port)


@pytest_twisted.ensureDeferred
async def test_runtime_socket_left_by_a_crash_is_replaced(tmp_path: Path) -> None:
    """A socket file nobody listens on any more is removed and listened on anew."""
    (tmp_path / "run").mkdir(mode=0o700)
    stale_socket(tmp_path / "run" / "pigeond.sock")
    port = runtime(tmp_path)
    assert port is not None
    try:
        assert (await get_async(tmp_path / "run" / "pigeond.sock")).endswith(b"hello")
    finally:
        await stop(port)


def test_runtime_socket_of_a_live_daemon_is_left_alone(tmp_path: Path, logged: list[str]) -> None:
    """When another daemon answers on the path, pigeond warns and leaves its socket be."""
    (tmp_path / "run").mkdir(mode=0o700)
    other = listening_unix_socket(tmp_path / "run" / "pigeond.sock")
    before = os.lstat(tmp_path / "run" / "pigeond.sock").st_ino
    try:
        assert runtime(tmp_path) is None
        assert os.lstat(tmp_path / "run" / "pigeond.sock").st_ino == before
        assert any("another daemon already listens" in line for line in logged), logged
    finally:
        other.close()


def test_a_file_that_is_not_a_socket_is_left_alone(tmp_path: Path, logged: list[str]) -> None:
    """A regular file at the runtime socket's path is neither removed nor used."""
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "run" / "pigeond.sock").write_text("mine")
    assert runtime(tmp_path) is None
    assert (tmp_path / "run" / "pigeond.sock").read_text() == "mine"
    assert any("is not a socket" in line for line in logged), logged


@pytest.mark.parametrize("loose", [0o770, 0o757, 0o1777])
def test_folder_writable_by_others_is_refused(
    tmp_path: Path, logged: list[str], loose: int
) -> None:
    """A runtime socket folder that group or others may write to is refused, with a log line."""
    (tmp_path / "run").mkdir()
    os.chmod(tmp_path / "run", loose)
    assert runtime(tmp_path) is None
    assert not (tmp_path / "run" / "pigeond.sock").exists()
    assert any("writable by group or others" in line for line in logged), logged


@needs_root
def test_folder_of_another_uid_is_refused(tmp_path: Path, logged: list[str]) -> None:
    """A runtime socket folder that belongs to another uid is refused, with a log line."""
    (tmp_path / "run").mkdir(mode=0o700)
    os.chown(tmp_path / "run", 65534, 65534)
    assert runtime(tmp_path) is None
    assert not (tmp_path / "run" / "pigeond.sock").exists()
    assert any("belongs to uid 65534" in line for line in logged), logged


def test_symlinked_folder_is_not_followed(tmp_path: Path, logged: list[str]) -> None:
    """A runtime socket folder that is a symbolic link is refused, even to our own folder."""
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "run").symlink_to(tmp_path / "elsewhere")
    assert runtime(tmp_path) is None
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert any("symbolic link" in line for line in logged), logged


@pytest_twisted.ensureDeferred
async def test_runtime_socket_is_removed_on_stop(tmp_path: Path) -> None:
    """Stopping the port removes the runtime socket file (it is pigeond's own)."""
    port = runtime(tmp_path)
    assert port is not None
    await stop(port)
    assert not (tmp_path / "run" / "pigeond.sock").exists()


@pytest_twisted.ensureDeferred
async def test_a_socket_put_in_its_place_is_not_removed_on_stop(tmp_path: Path) -> None:
    """On stop, a socket that replaced pigeond's at the path (another daemon's) stays."""
    port = runtime(tmp_path)
    assert port is not None
    path = tmp_path / "run" / "pigeond.sock"
    path.unlink()
    other = listening_unix_socket(path)
    try:
        await stop(port)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        other.close()


# -- the daemon ----------------------------------------------------------------------------


def wait_for_line(proc: DaemonProcess, text: str) -> None:
    """A line after the first "listening on" (that start() waits for) that has ``text``."""
    wait_until(lambda: text in proc.output(), PATIENCE_S, f"{text!r} in the log")


def wait_for_runtime_socket(proc: DaemonProcess) -> None:
    wait_for_line(proc, "(runtime socket)")


@pytest.mark.slow
def test_daemon_serves_its_runtime_socket_and_removes_it_on_stop(
    tmp_path: Path, daemons: DaemonFactory
) -> None:
    """pigeond listens on ``listen`` (logged first) and on the runtime socket; a clean stop
    removes the socket."""
    path = tmp_path / "run" / "pigeond" / "pigeond.sock"
    path.parent.parent.mkdir(mode=0o700)
    proc = daemons.start(
        tmp_path / "p.db", opencode_url="", env={"PIGEOND_RUNTIME_SOCKET": str(path)}
    )
    assert proc.address.startswith("tcp:127.0.0.1:")
    wait_for_runtime_socket(proc)
    assert b'"ok": true' in unix_get(path, "/health", PATIENCE_S)
    assert f"also listening on unix:{path} (runtime socket)" in proc.output()
    assert proc.stop() == 0
    assert not path.exists()


@pytest.mark.slow
def test_daemon_replaces_the_socket_its_crash_left(tmp_path: Path, daemons: DaemonFactory) -> None:
    """After a kill -9 the socket file stays behind; the next start replaces it and serves."""
    path = tmp_path / "run" / "pigeond.sock"
    env = {"PIGEOND_RUNTIME_SOCKET": str(path)}
    crashed = daemons.start(tmp_path / "p.db", opencode_url="", env=env)
    wait_for_runtime_socket(crashed)
    crashed.kill()
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    proc = daemons.start(tmp_path / "p.db", opencode_url="", env=env)
    wait_for_runtime_socket(proc)
    assert b'"ok": true' in unix_get(path, "/health", PATIENCE_S)
    assert "removed the stale runtime socket" in proc.output()


@pytest.mark.slow
def test_daemon_with_a_refused_folder_still_serves_tcp(
    tmp_path: Path, daemons: DaemonFactory
) -> None:
    """A world-writable runtime socket folder is refused with a log line; TCP still serves."""
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o1777)
    proc = daemons.start(
        tmp_path / "p.db",
        opencode_url="",
        env={"PIGEOND_RUNTIME_SOCKET": str(folder / "pigeond.sock")},
    )
    wait_for_line(proc, "runtime socket")
    with socket.create_connection(("127.0.0.1", proc.port), timeout=PATIENCE_S) as client:
        client.sendall(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")
        answer = client.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.0 200") or answer.startswith(b"HTTP/1.1 200")
    assert "not used: its folder" in proc.output()
    assert "writable by group or others" in proc.output()
    assert not (folder / "pigeond.sock").exists()
