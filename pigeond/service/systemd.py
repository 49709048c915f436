"""Being a good systemd service: one instance per database, sd_notify, the watchdog.

Readiness, status and stopping are told to systemd through ``NOTIFY_SOCKET``
(via ``sdnotify``).  The watchdog is fed only while the arbiter's ticks really
run, so a wedged reactor or a dead arbiter stops the pings and systemd restarts
the service.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

import sdnotify
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from pigeond.config import default_db_path
from pigeond.db_url import is_postgres_url
from pigeond.private_files import make_private_dirs, tighten

log = Logger()


class AlreadyRunning(Exception):
    def __init__(self, lock_path: Path, pid: str, detail: str = "") -> None:
        super().__init__(
            f"another pigeond (pid {pid or 'unknown'}) is using this database (lock {lock_path})"
            + (f"; {detail}" if detail else "")
        )


class InstanceLock:
    """Exclusive locks on the database and beside it, so two arbiters never share one queue.

    ``<db>.lock`` holds the pid for the error message; the database file itself
    is locked too, because a lock file can be deleted under a running pigeond
    and the next one would then lock a new file.  ``flock`` is dropped by the
    kernel when the holder dies, so a crash never leaves a stale lock behind,
    and on Linux it never meets SQLite's own POSIX (``fcntl``) locks.  Release
    only after the database is closed: closing any descriptor of a file drops
    the process's POSIX locks on it, SQLite's included.
    """

    def __init__(self, db_path: Path | str, *, database_file: bool = True) -> None:
        self.db_path = Path(db_path)
        self.path = Path(str(db_path) + ".lock")
        self.database_file = database_file  # False: no file to lock (PostgreSQL)
        self._fds: list[int] = []

    def acquire(self) -> None:
        make_private_dirs(self.path.parent)
        fd = self._lock(self.path)
        if fd is None:
            raise AlreadyRunning(self.path, self._holder())
        if not self.database_file:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            self._fds = [fd]
            return
        db_fd = self._lock(self.db_path)
        if db_fd is None:
            os.close(fd)
            raise AlreadyRunning(
                self.path,
                self._holder(),
                f"it holds the database file {self.db_path} itself ({self.path} was removed"
                " or replaced while it ran)",
            )
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fds = [fd, db_fd]

    @staticmethod
    def _lock(path: Path) -> int | None:
        """An open descriptor holding ``flock`` on ``path`` (created 0600), or None if taken."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        tighten(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def _holder(self) -> str:
        """The pid the lock file names, if there is one to read."""
        try:
            return self.path.read_text("ascii", errors="replace").strip()[:32]
        except OSError:
            return ""

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


def instance_lock(db: str, env: Mapping[str, str]) -> InstanceLock:
    """The lock of this host's one pigeond: on a SQLite file, the file and ``<db>.lock``;
    on PostgreSQL, ``pigeond-postgres.lock`` in the state folder.  Daemons on several
    hosts share one PostgreSQL database by design, but on one host (one user's, or the
    system service's state) a second daemon would be a second writer to its opencode."""
    if is_postgres_url(db):
        return InstanceLock(
            Path(default_db_path(env)).parent / "pigeond-postgres", database_file=False
        )
    return InstanceLock(db)


class Notifier(Protocol):
    def notify(self, state: str) -> None: ...


class NoNotifier:
    """Not run by systemd: nothing to tell."""

    def notify(self, state: str) -> None:
        pass


def notifier_from(env: Mapping[str, str]) -> Notifier:
    if not env.get("NOTIFY_SOCKET"):
        return NoNotifier()
    notifier: Notifier = sdnotify.SystemdNotifier()
    return notifier


def watchdog_period_s(env: Mapping[str, str], pid: int) -> float | None:
    """The watchdog period systemd asks for, if it asks this process."""
    usec = env.get("WATCHDOG_USEC", "")
    owner = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if owner and owner != str(pid):
        return None
    return int(usec) / 1_000_000


class Watchdog:
    """Sends ``WATCHDOG=1`` every half period while ``alive()`` says the work goes on."""

    def __init__(
        self,
        notifier: Notifier,
        clock: IReactorTime,
        period_s: float,
        alive: Callable[[], bool],
    ) -> None:
        self._notifier = notifier
        self._alive = alive
        self._loop = LoopingCall(self.ping)
        self._loop.clock = clock
        self.period_s = period_s
        self._warned = False

    def start(self) -> None:
        self._loop.start(self.period_s / 2, now=True)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def ping(self) -> None:
        try:
            if self._alive():
                self._notifier.notify("WATCHDOG=1")
                self._warned = False
            elif not self._warned:
                self._warned = True
                log.error(
                    "pigeond is not working (the arbiter is not ticking, or the database file"
                    " is gone); withholding the watchdog ping"
                )
        except Exception:
            log.failure("watchdog ping failed")


class StatusReporter:
    """Keeps systemd's ``STATUS=`` current (``systemctl status pigeond`` shows it).

    It has no timer of its own: the daemon's one tick calls :meth:`report` (every second
    at most), so it never wakes an idle daemon; the status itself reads the database only
    when a write may have come (see :meth:`pigeond.service.daemon.Daemon.status_line`)."""

    def __init__(self, notifier: Notifier, status: Callable[[], Deferred[str]]) -> None:
        """``status`` may answer later (it reads the database off the reactor thread)."""
        self._notifier = notifier
        self._status = status
        self._running = False
        self._last = ""
        self._asking: Deferred[None] | None = None

    def start(self) -> None:
        self._running = True
        self.report()

    def stop(self) -> None:
        self._running = False

    def report(self) -> None:
        """Ask for the status and send it if it changed; one question at a time, and none
        before :meth:`start` or after :meth:`stop`."""
        if self._asking is not None or not self._running:
            return
        asking = (
            maybeDeferred(self._status)
            .addErrback(lambda f: f"status unavailable: {f.getErrorMessage()}")
            .addCallback(self._send)
        )
        if not asking.called:
            self._asking = asking
            asking.addBoth(self._answered)

    def _answered(self, _: object) -> None:
        self._asking = None

    def _send(self, status: str) -> None:
        if status != self._last:
            self._notifier.notify(f"STATUS={status}")
            self._last = status
