"""Where pigeond listens, and why it does not simply call ``serverFromString(...).listen()``.

Whoever can connect to one of pigeond's Unix sockets is identified by the peer
credentials of the connection, and may send without a token.  So the socket
files must be exactly as private as intended, and Twisted's defaults are not:

- ``unix:PATH`` without ``mode=`` makes the socket mode 0666 (anyone may
  connect).  Here it is 0600 unless ``mode=`` says otherwise.
- ``systemd:domain=UNIX`` (socket activation) goes through Twisted's
  ``adoptStreamPort``, whose ``unix.Port.startListening`` chmods the socket's
  path to 0666 even though the socket already exists, and whose
  ``connectionLost`` unlinks it.  Under the system unit the file belongs to
  root (the socket unit made it), so the chmod fails with "Operation not
  permitted" and pigeond could never start; where it succeeds it would widen
  the mode the admin chose in ``SocketMode=``; and the unlink on stop would
  take the socket unit's file away from the next start.  Here a passed Unix
  socket is adopted as it is: never chmodded, never unlinked.
- the runtime socket (``runtime_socket``) is pigeond's own, in a folder only
  pigeond (and, with ``allow_group``, that group) can enter, which pigeond
  checks before it puts a socket there: a folder someone else controls is
  refused, never followed.  A socket left by a crash is replaced; one a live
  daemon serves is left alone; pigeond removes its own on a clean stop.

Both Unix cases use :class:`UnixSocketPort`, a ``twisted.internet.unix.Port`` that wraps
a socket which is already bound and listening, so accepted connections are ordinary
``unix.Server`` transports (``getHandle()`` is the connected socket, for ``SO_PEERCRED``).

The reactor is passed through as an opaque ``object``: which of Twisted's reactor
interfaces it must provide depends on the ``listen`` text (TCP, a Unix socket, an adopted
descriptor), and only Twisted's endpoint parser and ports, untyped, ask for them.
"""

from __future__ import annotations

import errno
import grp
import os
import socket
import stat
from typing import Any

from twisted.internet import defer
from twisted.internet.endpoints import AdoptedStreamServerEndpoint, serverFromString
from twisted.internet.error import AlreadyListened
from twisted.internet.interfaces import IListeningPort, IProtocolFactory, IStreamServerEndpoint
from twisted.logger import Logger
from zope.interface import implementer

from pigeond.twisted_internals import AdoptedUnixPort

log = Logger()

PRIVATE_SOCKET_MODE = 0o600
GROUP_SOCKET_MODE = 0o660
PRIVATE_FOLDER_MODE = 0o700
GROUP_FOLDER_MODE = 0o750
# a folder anyone but its owner may write to lets them swap or plant the socket
UNSAFE_FOLDER_BITS = 0o022
# connections the kernel queues before pigeond accepts them (capped by net.core.somaxconn):
# a burst of clients waits here instead of being refused
LISTEN_BACKLOG = 1024


# -- the listen endpoint -----------------------------------------------------------------


def _split_unescaped(text: str, separator: str) -> list[str]:
    """``text`` split on ``separator`` where it is not escaped with a backslash, as
    Twisted's endpoint-string parser splits (escapes are kept in the pieces)."""
    pieces = [""]
    chars = iter(text)
    for char in chars:
        if char == "\\":
            pieces[-1] += char + next(chars, "")
        elif char == separator:
            pieces.append("")
        else:
            pieces[-1] += char
    return pieces


def with_default_mode(listen: str) -> str:
    """``listen`` with ``:mode=600`` appended to a ``unix:`` endpoint that sets no mode
    (Twisted's own default is 0666); any other endpoint unchanged."""
    pieces = _split_unescaped(listen, ":")
    if pieces[0] != "unix":
        return listen
    keywords = [_split_unescaped(piece, "=") for piece in pieces[1:]]
    if any(len(kv) > 1 and kv[0] == "mode" for kv in keywords):
        return listen
    return f"{listen}:mode={PRIVATE_SOCKET_MODE:o}"


def with_default_backlog(listen: str) -> str:
    """``listen`` with ``:backlog=1024`` appended to a ``tcp:``, ``tcp6:`` or ``unix:``
    endpoint that sets none (Twisted's default, 50, drops a burst of connects); any other
    endpoint unchanged. A socket systemd passes keeps its unit's ``Backlog=`` (by default
    the kernel's ``somaxconn``), which pigeond has no business changing."""
    pieces = _split_unescaped(listen, ":")
    if pieces[0] not in ("tcp", "tcp6", "unix"):
        return listen
    keywords = [_split_unescaped(piece, "=") for piece in pieces[1:]]
    if any(len(kv) > 1 and kv[0] == "backlog" for kv in keywords):
        return listen
    return f"{listen}:backlog={LISTEN_BACKLOG}"


def server_endpoint(reactor: object, listen: str) -> IStreamServerEndpoint:
    """The endpoint for the ``listen`` setting: ``serverFromString`` with a private default
    mode for ``unix:`` and a listen backlog sized for bursts, and a passed Unix socket
    adopted without chmod or unlink.

    Raises what ``serverFromString`` raises (``systemd:`` with no socket passed raises
    IndexError or KeyError: Twisted reads and clears ``LISTEN_FDS`` when imported)."""
    endpoint = serverFromString(reactor, with_default_backlog(with_default_mode(listen)))
    return adopt_unix_as_is(reactor, endpoint)


def adopt_unix_as_is(reactor: object, endpoint: IStreamServerEndpoint) -> IStreamServerEndpoint:
    """An :class:`AdoptedUnixEndpoint` in place of Twisted's adopted endpoint for an AF_UNIX
    descriptor; any other endpoint (TCP, or an adopted INET socket) is returned as it is."""
    if isinstance(endpoint, AdoptedStreamServerEndpoint) and (
        endpoint.addressFamily == socket.AF_UNIX
    ):
        return AdoptedUnixEndpoint(reactor, endpoint.fileno)
    return endpoint


def adopt_listening_socket(fileno: int) -> socket.socket:
    """A socket object for the listening AF_UNIX stream socket ``fileno``: a duplicate
    (close-on-exec, non-blocking); ``fileno`` itself is closed once the checks pass."""
    sock = socket.socket(fileno=os.dup(fileno))  # family and type read from the kernel
    try:
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            raise ValueError(
                f"descriptor {fileno} is {sock.family.name}/{sock.type.name},"
                " not a Unix stream socket (check domain= and the .socket unit)"
            )
        if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            raise ValueError(f"descriptor {fileno} is a Unix socket that is not listening")
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    os.close(fileno)
    return sock


@implementer(IStreamServerEndpoint)
class AdoptedUnixEndpoint:
    """Listen on a Unix socket systemd passed (``systemd:domain=UNIX``), leaving its file
    alone: its mode is the socket unit's ``SocketMode=``, and it outlives pigeond."""

    def __init__(self, reactor: object, fileno: int) -> None:
        self.reactor = reactor
        self.fileno = fileno
        self._used = False

    def listen(self, protocolFactory: IProtocolFactory) -> defer.Deferred[IListeningPort]:
        if self._used:
            return defer.fail(AlreadyListened())
        self._used = True
        try:
            sock = adopt_listening_socket(self.fileno)
            port = UnixSocketPort(sock, protocolFactory, self.reactor)
            port.startListening()
        except BaseException:
            return defer.fail()
        return defer.succeed(port)


# -- the port ------------------------------------------------------------------------------


class UnixSocketPort(AdoptedUnixPort):
    """A ``twisted.internet.unix.Port`` around a socket that is already bound and listening.

    ``startListening`` and ``connectionLost`` are overridden because Twisted's chmod the
    path (to ``mode``, 0666 by default) and unlink it, whoever owns it.  This one never
    chmods; on stop it unlinks the path only when ``remove_on_stop`` is given and the path
    is still the very socket file it names (``(st_dev, st_ino)``), so a socket someone
    else has put there since is never removed.

    On stop the socket is closed without ``shutdown()``: a passed socket is shared with
    systemd, and a shutdown of a listening socket ends it for every holder (systemd sees
    POLLHUP and fails the .socket unit).  Twisted's TCP port skips the shutdown for an
    adopted socket the same way; its Unix port does not (see
    :class:`pigeond.twisted_internals.AdoptedUnixPort`).  For a socket only pigeond
    holds, close() alone does the same as shutdown().
    """

    def __init__(
        self,
        sock: socket.socket,
        factory: IProtocolFactory,
        reactor: object,
        remove_on_stop: tuple[int, int] | None = None,
    ) -> None:
        self.path: str | bytes = sock.getsockname()  # bytes for an abstract name
        super().__init__(self.path, factory, reactor=reactor)
        self.listening_socket: socket.socket | None = sock
        self.remove_on_stop = remove_on_stop

    def startListening(self) -> None:
        sock = self.listening_socket
        if sock is None:
            raise AlreadyListened()
        self.listening_socket = None
        assert self.factory is not None
        self.factory.doStart()
        self.listen_on(sock)

    def connectionLost(self, reason: Any) -> None:
        if self.remove_on_stop is not None:
            _remove_if_same(self.path, self.remove_on_stop)
        self.stop_listening_keeping_path(reason)


def _file_id(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _remove_if_same(path: bytes | str, file_id: tuple[int, int]) -> None:
    try:
        if _file_id(os.lstat(path)) == file_id:
            os.unlink(path)
    except OSError as e:
        log.warn("could not remove the socket {path}: {error}", path=os.fsdecode(path), error=e)


# -- the runtime socket ------------------------------------------------------------------


class RuntimeSocketRefused(Exception):
    """The runtime socket is not used; the text says why, for one log line."""


def _group_id(name: str) -> int | None:
    if not name:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        log.error(
            "allow_group {group!r}: no such group; the runtime socket stays private (0600)",
            group=name,
        )
        return None


def _give_to_group(path: str, gid: int) -> None:
    """chown ``path`` to group ``gid`` unless it has that group already, as it has when
    ``gid`` is pigeond's own group (``Group=`` in the unit): the unit's system call
    filter (``~@privileged``) refuses every chown, even a no-op one."""
    if os.lstat(path).st_gid != gid:
        os.chown(path, -1, gid)


def _own_folder(folder: str, gid: int | None) -> tuple[int, int]:
    """Create ``folder`` (0700, or 0750 with group ``gid``), or check that the existing one
    is a real folder of pigeond's uid that nobody else may write to; its file id."""
    mode = PRIVATE_FOLDER_MODE if gid is None else GROUP_FOLDER_MODE
    try:
        os.mkdir(folder, PRIVATE_FOLDER_MODE)
    except FileExistsError:
        pass
    except FileNotFoundError as e:
        raise RuntimeSocketRefused(
            f"its folder's parent {os.path.dirname(folder)} is missing"
        ) from e
    else:
        if gid is not None:
            try:
                _give_to_group(folder, gid)
            except OSError as e:
                log.error(
                    "runtime socket folder {folder}: cannot give it to group {gid}: {error};"
                    " it stays private (0700)", folder=folder, gid=gid, error=e.strerror,
                )  # fmt: skip
                mode = PRIVATE_FOLDER_MODE
        os.chmod(folder, mode)  # mkdir's mode was masked by the umask
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode):
        raise RuntimeSocketRefused(f"its folder {folder} is a symbolic link, not followed")
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeSocketRefused(f"{folder} is not a folder")
    if st.st_uid != os.geteuid():
        raise RuntimeSocketRefused(
            f"its folder {folder} belongs to uid {st.st_uid}, not to pigeond's uid {os.geteuid()}"
        )
    if st.st_mode & UNSAFE_FOLDER_BITS:
        raise RuntimeSocketRefused(
            f"its folder {folder} is writable by group or others"
            f" (mode {stat.S_IMODE(st.st_mode):04o}); make it 0700 or 0750"
        )
    if gid is not None and (st.st_gid != gid or not st.st_mode & stat.S_IXGRP):
        log.warn(
            "runtime socket folder {folder} (group {folder_gid}, mode {mode:04o}): members of"
            " group {gid} cannot reach the socket",
            folder=folder, folder_gid=st.st_gid, mode=stat.S_IMODE(st.st_mode), gid=gid,
        )  # fmt: skip
    return _file_id(st)


def _clear_stale(path: str) -> None:
    """Remove a socket file nobody listens on any more (left by a crash); refuse when a
    live daemon answers there, or when the path is not a socket at all."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise RuntimeSocketRefused(f"{path} exists and is not a socket; it is left alone")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)  # nobody is listening: a crash left it
        log.info("removed the stale runtime socket {path}", path=path)
        return
    except FileNotFoundError:
        return
    except BlockingIOError:
        pass  # a listener whose backlog is full: alive
    finally:
        probe.close()
    raise RuntimeSocketRefused(f"another daemon already listens on {path}")


def listen_runtime_socket(
    reactor: object, factory: IProtocolFactory, path: str, allow_group: str = ""
) -> UnixSocketPort | None:
    """Listen on the runtime socket ``path`` (mode 0600, or 0660 owned by ``allow_group``),
    or log why not and return None: it is a convenience, TCP and ``listen`` still serve."""
    if not path:
        return None
    path = os.path.abspath(path)
    gid = _group_id(allow_group)
    sock: socket.socket | None = None
    bound: tuple[int, int] | None = None
    try:
        folder_id = _own_folder(os.path.dirname(path), gid)
        _clear_stale(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # the folder keeps everyone else out until the mode below is set
        sock.bind(path)
        bound = _file_id(os.lstat(path))
        if _file_id(os.lstat(os.path.dirname(path))) != folder_id:
            raise RuntimeSocketRefused(f"its folder {os.path.dirname(path)} was replaced")
        mode = PRIVATE_SOCKET_MODE
        if gid is not None:
            try:
                _give_to_group(path, gid)
                mode = GROUP_SOCKET_MODE
            except OSError as e:
                log.error(
                    "runtime socket {path}: cannot give it to group {group} ({gid}): {error};"
                    " only pigeond's own user (and allow_uids) can use it",
                    path=path, group=allow_group, gid=gid, error=e.strerror,
                )  # fmt: skip
        os.chmod(path, mode)
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
        port = UnixSocketPort(sock, factory, reactor, remove_on_stop=bound)
        port.startListening()
        return port
    except RuntimeSocketRefused as e:
        log.warn("runtime socket {path} not used: {reason}", path=path, reason=str(e))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            log.warn("runtime socket {path} not used: another daemon took it", path=path)
        else:
            log.error("runtime socket {path} not used: {error}", path=path, error=e)
    if sock is not None:
        sock.close()
    if bound is not None:
        _remove_if_same(path, bound)
    return None
