"""Noticing that the database file was deleted, replaced or moved under a running pigeond.

SQLite keeps using the file it opened.  Once that file is unlinked or renamed
away, every write still succeeds, into an inode no later start will open:
sends get 202 and the messages are gone at the next start, and a second
pigeond can start on the path with a fresh queue.  So the identity
``(st_dev, st_ino)`` of the file opened at start is kept and compared with
``os.stat(path)`` every tick and on every send; a missing or different file
makes the problem permanent for this process (only a restart opens the file
on disk): sends get 503, ``/health`` is not ok, delivery stops, and one
``critical`` line says so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.web import server

from pigeond.api.web import HttpError
from pigeond.db_url import is_postgres_url
from pigeond.model import NewMessage

log = Logger()

FileIdentity = tuple[int, int]
Stat = Callable[[str], os.stat_result]


def identity_of(path: Path | str, stat: Stat = os.stat) -> FileIdentity:
    st = stat(str(path))
    return st.st_dev, st.st_ino


class DatabaseWatch:
    """Knows whether ``path`` is still the database file this process opened."""

    def __init__(
        self,
        path: Path | str,
        clock: IReactorTime,
        *,
        interval_s: float | None = 0.5,
        stat: Stat = os.stat,
    ) -> None:
        """Call it right after the database is opened: the file there now is the one kept.
        A PostgreSQL database has no file to vanish (its outages are a lost connection,
        which each call answers as StorageUnavailable): then nothing is watched.
        ``interval_s`` None: no timer of its own, the daemon's one tick calls :meth:`check`."""
        self.path = str(path)
        self._stat = stat
        self.watching = not is_postgres_url(self.path)
        self._opened = identity_of(self.path, stat) if self.watching else (0, 0)
        self.problem: str | None = None
        self._loop = LoopingCall(self.check)
        self._loop.clock = clock
        self._interval_s = interval_s

    def start(self) -> None:
        """Check every ``interval_s`` even when nothing is sent or delivered."""
        if self.watching and self._interval_s is not None and not self._loop.running:
            self._loop.start(self._interval_s, now=True)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def check(self) -> str | None:
        """Why the file at the path is not the database opened at start; None while it is."""
        if self.problem is not None or not self.watching:
            return self.problem
        with contextlib.suppress(OSError):  # a missing file is said by stat; else no proof
            self.stat(self.path)
        return self.problem

    def stat(self, path: str) -> os.stat_result:
        """``os.stat(path)``; when ``path`` is the database's, also the check of its identity
        (so the quiet tick's own stat of the file is the watch's: one stat a tick)."""
        ours = path == self.path and self.watching and self.problem is None
        try:
            st = self._stat(path)
        except (FileNotFoundError, NotADirectoryError):
            if ours:
                self._gone("deleted (or moved away)")
            raise
        if ours and (st.st_dev, st.st_ino) != self._opened:
            self._gone("replaced by another file")
        return st

    def _gone(self, how: str) -> None:
        self.problem = f"database file {self.path} was {how} while pigeond ran"
        log.critical(
            "{error}: nothing is stored or delivered from now on; restart pigeond"
            " (messages accepted before went with the old file)",
            error=self.problem,
        )

    def refuse_send(self, request: server.Request, message: NewMessage) -> None:
        """A send check: 503 once the file is gone, so no 202 promises a lost message."""
        problem = self.check()
        if problem is not None:
            raise HttpError(503, f"{problem}; nothing stored; restart pigeond")
