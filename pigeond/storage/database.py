"""The repository as the daemon uses it: every call answered by a Deferred, off the reactor.

SQLite calls block: a write waits up to the busy timeout (5 s) for a lock
another process holds (``sqlite3`` in a terminal, ``pigeon requeue``), and
an fsync can take long on a busy disk.  On the reactor thread that wait
stopped everything, ``/health`` included.  So the daemon never calls
:class:`SwarmRepository` itself; it asks a :class:`Database`:

- **writes** run on one writer thread with one connection, in the order
  asked, except that the writes a 202 or a hand-off waits on go before the
  bookkeeping queued (:mod:`pigeond.storage.write_queue`): SQLite lets one
  writer in at a time anyway, and one thread keeps transactions from queueing
  on the file lock against each other;
- **bookkeeping** (a call marked ``shares_commit``: a transcript look's record, verified,
  answered, turns, routes)
  queued back to back shares one transaction and one commit;
- **sends** are writes too, but grouped: sends that queue up while the writer is
  busy share one transaction and one fsync (:mod:`pigeond.storage.group_commit`);
- **reads** run on a few reader threads, each with its own read-only
  connection.  In WAL mode a read never waits for a writer, so a lock held
  by another process delays only the writes (and what waits on them); a
  send gets its 503 after the busy timeout while ``/health`` and the inbox
  keep answering.

Callers pass the repository method itself (``db.write(SwarmRepository.accept,
message, now_ms)``), so the storage package still owns every statement and
the types of arguments and results are checked.  :class:`InlineDatabase`
runs the same calls at once on the calling thread: for unit tests on a
``Clock``, where threads would only add waiting.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from pigeond.config import Config
from pigeond.storage.engines import engine_for
from pigeond.storage.errors import StorageUnavailable
from pigeond.storage.group_commit import GroupCommit
from pigeond.storage.repository import Accept, AcceptOutcome, SwarmRepository
from pigeond.storage.schema import DEFAULT_BUSY_TIMEOUT_MS
from pigeond.storage.write_marks import is_urgent
from pigeond.storage.write_queue import WriteQueue

P = ParamSpec("P")
R = TypeVar("R")

RepositoryCall = Callable[Concatenate[SwarmRepository, P], R]

DEFAULT_READERS = 2
# the namespace of what the schema logs at start (a one-time conversion)
SCHEMA_LOG = "pigeond.storage.schema"


class Database(Protocol):
    """Repository calls answered later; see the module's docstring."""

    def read(self, call: RepositoryCall[P, R], *args: P.args, **kwargs: P.kwargs) -> Deferred[R]:
        """Run ``call(repo, *args, **kwargs)``; it must not write."""

    def write(self, call: RepositoryCall[P, R], *args: P.args, **kwargs: P.kwargs) -> Deferred[R]:
        """Run ``call(repo, *args, **kwargs)`` after every write asked before it (but an
        urgent call, pigeond/storage/write_queue.py, goes before queued ones that are not)."""

    def accept(self, accept: Accept) -> Deferred[AcceptOutcome]:
        """Store a send; sends close together share one commit (see group_commit)."""

    def configure(self, config: Config) -> None:
        """A reload's settings: how long a ``delivery.failed`` notice queued from now on may
        wait (``default_ttl_s``)."""

    def close(self) -> None:
        """Finish the calls already asked, refuse new ones, close the connections."""


class InlineDatabase:
    """Runs each call at once on the calling thread: for tests on a ``Clock``."""

    def __init__(self, repo: SwarmRepository) -> None:
        self.repo = repo

    def read(self, call: RepositoryCall[P, R], *args: P.args, **kwargs: P.kwargs) -> Deferred[R]:
        return self._run(call, *args, **kwargs)

    def write(self, call: RepositoryCall[P, R], *args: P.args, **kwargs: P.kwargs) -> Deferred[R]:
        return self._run(call, *args, **kwargs)

    def accept(self, accept: Accept) -> Deferred[AcceptOutcome]:
        return self._run(SwarmRepository.accept_many, [accept]).addCallback(lambda o: o[0])

    def configure(self, config: Config) -> None:
        self.repo.notice_ttl_ms = config.default_ttl_s * 1000

    def close(self) -> None:
        self.repo.close()

    def _run(self, call: RepositoryCall[P, R], *args: P.args, **kwargs: P.kwargs) -> Deferred[R]:
        try:
            return succeed(call(self.repo, *args, **kwargs))
        except Exception:
            return fail(Failure())


class _DaemonThread(threading.Thread):
    """A thread that never keeps the process alive: a start that fails after the database
    opened, or an exit without :meth:`ThreadedDatabase.close`, still exits.  (A write cut
    off at exit is a transaction never committed, and no 202 was sent for it.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.daemon = True


class DaemonThreadPool(ThreadPool):
    threadFactory = _DaemonThread


class ThreadedDatabase:
    """One writer thread and ``readers`` reader threads, each with its own connection.

    ``open_writer`` and ``open_reader`` make the repositories (on the calling
    thread, at once, so a file that cannot be opened fails the start); reader
    connections can only read (the engine opens them so).  After :meth:`close` every call fails
    with :class:`StorageUnavailable`, so a hand-off that ends late writes
    nothing instead of touching a closed connection.
    """

    def __init__(
        self,
        reactor: IReactorFromThreads,
        open_writer: Callable[[], SwarmRepository],
        open_reader: Callable[[], SwarmRepository],
        *,
        readers: int = DEFAULT_READERS,
    ) -> None:
        self._reactor = reactor
        self._writer = open_writer()
        self._idle_readers: queue.SimpleQueue[SwarmRepository] = queue.SimpleQueue()
        self._readers: list[SwarmRepository] = []
        try:
            for _ in range(readers):
                reader = open_reader()
                self._readers.append(reader)
                self._idle_readers.put(reader)
        except BaseException:
            self._close_connections()
            raise
        # the writes a 202 or a hand-off waits on go first (pigeond/storage/write_queue.py)
        # and bookkeeping queued together shares a commit
        self._writes = WriteQueue(
            reactor, name="pigeond-db-writer", together=self._writer.write_together
        )
        self._read_pool = DaemonThreadPool(readers, readers, name="pigeond-db-reader")
        self._closed = False
        self._writes.start()
        self._read_pool.start()
        self.group_commit = GroupCommit(self._writes, self._writer)

    def read(self, call: RepositoryCall[P, R], *args: P.args, **kwargs: P.kwargs) -> Deferred[R]:
        if self._closed:
            return fail(StorageUnavailable("the database is closed (pigeond is stopping)"))

        def on_a_reader() -> R:
            repo = self._idle_readers.get()  # one per thread: never more calls than readers
            try:
                return call(repo, *args, **kwargs)
            finally:
                self._idle_readers.put(repo)

        return deferToThreadPool(self._reactor, self._read_pool, on_a_reader)

    def write(self, call: RepositoryCall[P, R], *args: P.args, **kwargs: P.kwargs) -> Deferred[R]:
        if self._closed:
            return fail(StorageUnavailable("the database is closed (pigeond is stopping)"))
        return self._writes.submit(is_urgent(call), call, self._writer, *args, **kwargs)

    def accept(self, accept: Accept) -> Deferred[AcceptOutcome]:
        if self._closed:
            return fail(StorageUnavailable("the database is closed (pigeond is stopping)"))
        return self.group_commit.accept(accept)

    def configure(self, config: Config) -> None:
        # an int attribute: the writer thread reads it whole, before or after
        self._writer.notice_ttl_ms = config.default_ttl_s * 1000

    def close(self) -> None:
        """Refuse new calls, let the calls already asked finish (a write waits at most the
        busy timeout), then close every connection.  Blocks: call it last, at shutdown."""
        if self._closed:
            return
        self._closed = True
        self._writes.stop()
        self._read_pool.stop()
        self._close_connections()

    def _close_connections(self) -> None:
        for repo in [self._writer, *self._readers]:
            repo.close()


def open_threaded(
    path: Path | str,
    reactor: IReactorFromThreads,
    *,
    readers: int = DEFAULT_READERS,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
) -> ThreadedDatabase:
    """The daemon's database at ``path``: opened by its engine (a SQLite file made private,
    or a ``postgresql://`` URL's database), migrated, then served by threads.  A write
    waits at most ``busy_timeout_ms`` for a lock another process holds."""
    engine = engine_for(path)
    log = Logger(SCHEMA_LOG)
    return ThreadedDatabase(
        reactor,
        lambda: SwarmRepository(engine.open_writer(path, busy_timeout_ms=busy_timeout_ms, log=log)),
        lambda: SwarmRepository(engine.open_reader(path, busy_timeout_ms=busy_timeout_ms)),
        readers=readers,
    )
