"""What a daemon needs beside others on one database (PostgreSQL), wired in one place.

On a SQLite file one daemon alone serves the queue (the instance lock sees to that) and
none of this is made.  On PostgreSQL each daemon gets its target locks (one drain per
target whichever daemon runs it, pigeond/storage/postgres/locks.py) and its routing
(which targets its opencode has, pigeond/delivery/routing.py), and it listens for the
sends accepted anywhere (pigeond/storage/postgres/notify.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from twisted.internet.interfaces import IReactorFromThreads, IReactorTime

from pigeond.config import Config
from pigeond.delivery.registry import SessionDirectoryRegistry
from pigeond.delivery.routing import Routing
from pigeond.storage.database import Database
from pigeond.storage.engines import engine_for
from pigeond.storage.postgres.locks import PgTargetLocks, ThreadedTargetLocks
from pigeond.storage.postgres.notify import DueListener


@dataclass
class SharedDatabaseParts:
    target_locks: ThreadedTargetLocks
    routing: Routing
    url: str
    reactor: IReactorFromThreads
    listener: DueListener | None = None

    def listen(self, kick: Callable[[str], None]) -> DueListener:
        """Kick the arbiter for each target a send anywhere was accepted for (NOTIFY); the
        listener also counts every write it hears of (the quiet tick's on PostgreSQL)."""
        self.listener = DueListener(self.url, self.reactor, kick)
        self.listener.start()
        return self.listener

    def close(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        self.target_locks.close()


def shared_database_parts(
    config: Config, reactor: IReactorTime, db: Database, registry: SessionDirectoryRegistry
) -> SharedDatabaseParts | None:
    """The locks and routing of a daemon on PostgreSQL; None on a SQLite file."""
    if not engine_for(config.db).shared:
        return None
    threads = IReactorFromThreads(reactor)  # the locks and the listener work in threads
    locks = ThreadedTargetLocks(threads, PgTargetLocks(config.connect_db))
    routing = Routing(db, registry, reactor, config.daemon_name, config.opencode_url)
    return SharedDatabaseParts(locks, routing, config.connect_db, threads)


def seen_status(
    observe: Callable[[str, str], None], routing: Routing | None
) -> Callable[[str, str], None]:
    """The event stream's status callback: the turn tracker's, and on a shared database
    the session routed here too (our opencode has it)."""
    if routing is None:
        return observe

    def both(session: str, status: str) -> None:
        observe(session, status)
        routing.seen([session])

    return both
