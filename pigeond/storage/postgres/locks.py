"""Per-target exclusivity across daemons: a PostgreSQL advisory lock held for a whole drain.

Within one daemon the arbiter keeps at most one drain in flight per target.  Daemons on
several hosts share one database, so that is not enough: two of them could hand the same
target a prompt at once (parallel turns, or a message handed off twice).  So a drain
first takes ``pg_try_advisory_lock`` on the target (its own key space: a class id and
the target's hash) and holds it until its last hand-off is recorded and, in turn
delivery, its last turn has ended; a daemon that cannot take it leaves the target to
the one that has it (its tick tries again).

The locks are session locks on one connection of their own: they die with that
connection, so a daemon killed with ``kill -9``, or cut off from PostgreSQL, holds
nothing.  A connection opened again is a new session that holds none of the old locks,
so every lock remembers the connection's generation when taken: :meth:`held` (asked
before each prompt is sent) is false once the connection it was taken on is gone, and
the drain stops there, having sent nothing more.

All calls block; :class:`ThreadedTargetLocks` runs them on one thread of their own.
"""

from __future__ import annotations

import contextlib
from typing import Final

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import deferToThreadPool

from pigeond.storage.database import DaemonThreadPool
from pigeond.storage.errors import UNAVAILABLE_ERRORS, StorageUnavailable
from pigeond.storage.postgres.connection import PgConnection

# The advisory lock class of targets ("pige" in ASCII); the migration lock is a bigint key,
# a key space of its own.
TARGET_LOCK_CLASS: Final = 0x7069_6765


class PgTargetLocks:
    """The advisory locks of one daemon's drains (blocking calls; see the module)."""

    def __init__(self, url: str) -> None:
        self._conn = PgConnection(url)
        self._held: dict[str, int] = {}  # target -> the connection generation it was taken on

    def acquire(self, target: str) -> bool:
        """Take ``target``'s lock if no other session holds it; whether it is ours now."""
        try:
            row = self._conn.execute(
                "SELECT pg_try_advisory_lock(?, hashtext(?))", (TARGET_LOCK_CLASS, target)
            ).fetchone()
        except UNAVAILABLE_ERRORS as e:
            raise StorageUnavailable(f"cannot take the lock of {target}: {e}") from e
        if row is None or not row[0]:
            return False
        self._held[target] = self._conn.generation
        return True

    def held(self, target: str) -> bool:
        """Whether ``target``'s lock is still ours: taken, and its connection alive."""
        taken_on = self._held.get(target)
        if taken_on is None or taken_on != self._conn.generation:
            return False
        try:
            self._conn.execute("SELECT 1")
        except UNAVAILABLE_ERRORS:
            return False
        return taken_on == self._conn.generation

    def release(self, target: str) -> None:
        """Give ``target``'s lock back (nothing to do when its connection is gone)."""
        taken_on = self._held.pop(target, None)
        if taken_on is None or taken_on != self._conn.generation:
            return
        with contextlib.suppress(*UNAVAILABLE_ERRORS):  # else its session is gone, locks too
            self._conn.execute(
                "SELECT pg_advisory_unlock(?, hashtext(?))", (TARGET_LOCK_CLASS, target)
            )

    def close(self) -> None:
        self._held.clear()
        self._conn.close()


class ThreadedTargetLocks:
    """:class:`PgTargetLocks` answered by Deferreds, its calls in order on one thread."""

    def __init__(self, reactor: IReactorFromThreads, locks: PgTargetLocks) -> None:
        self._reactor = reactor
        self._locks = locks
        self._pool = DaemonThreadPool(1, 1, name="pigeond-target-locks")
        self._pool.start()

    def acquire(self, target: str) -> Deferred[bool]:
        return deferToThreadPool(self._reactor, self._pool, self._locks.acquire, target)

    def held(self, target: str) -> Deferred[bool]:
        return deferToThreadPool(self._reactor, self._pool, self._locks.held, target)

    def release(self, target: str) -> Deferred[None]:
        return deferToThreadPool(self._reactor, self._pool, self._locks.release, target)

    def close(self) -> None:
        """Let the calls asked finish, then close the connection (its locks go with it)."""
        self._pool.stop()
        self._locks.close()
