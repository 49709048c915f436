"""The quiet tick: an idle daemon's periodic jobs skip their database reads.

Each periodic job (the arbiter's dispatch, the expiry sweep, the verifier and the
permission poll, the owed-replies sweep, the sender proofs, the policy refresh) reads the
database on every tick for work that is due.  Idle, every one of those reads finds
nothing, and each costs a trip to a database thread and back.  :class:`QuietGate` knows,
without SQL, when nothing can have become due:

* no write since the last look: the SQLite file and its ``-wal`` file have the same
  identity, size and modification time (an ``os.stat`` of each, in the event loop's
  thread).  Every write, the daemon's own and any other process's (``pigeon``, sqlite3),
  changes one of them;
* and the last look (:meth:`~pigeond.storage.timed_work.TimedWork.timed_work_at`) found
  no open work the clock could make due, or only owed replies whose next step is later.

While both hold, :attr:`QuietGate.quiet` is true and the jobs skip their reads.  A
change seen marks the gate busy at once (the jobs of that same tick read as before), and
one read looks again; every ``SAFETY_NET_S`` it looks again anyway, with that one read
(the gate turns busy if it finds work due, and the jobs of :func:`on_change` read again),
not with every job's on the same tick.  On PostgreSQL there
is no file to watch: every write transaction notifies ``pigeond_changed`` at its commit,
and the daemon's listener counts what it hears (pigeond/storage/postgres/notify.py), which
the gate compares instead (:meth:`QuietGate.watch`); while the listener is not connected
a write may go unheard, so the gate stays busy and the jobs read every tick.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from typing import Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pigeond.config import Config
from pigeond.db_url import is_postgres_url
from pigeond.service.db_watch import Stat
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database

log = Logger()

# However still the files look, the gate reads again this often: the bound on a write
# the stat did not show.  Two are known: a commit whose frames were written (the stat
# changed) but not yet visible to readers when the look read (its sync still running),
# and, where file times are coarse, a -wal rewritten in place to the same size within one
# tick of the file system's clock.  SQLite's own commit counter (the wal-index header in
# -shm) would tell both, but pigeond must not open -shm itself: closing any descriptor of
# a file drops every POSIX lock the process holds on it, SQLite's included.
SAFETY_NET_S = 30.0

Signature = tuple[object, ...]


def file_signature(path: str, stat: Stat = os.stat) -> Signature:
    """Identity, modification time (ns) and size of the database and its -wal file."""
    found: list[tuple[int, int, int] | None] = []
    for name in (path, path + "-wal"):
        try:
            st = stat(name)
        except OSError:
            found.append(None)
        else:
            found.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(found)


class QuietGate:
    """Whether the periodic jobs may skip their reads on this tick; see the module."""

    def __init__(
        self,
        db: Database,
        clock: IReactorTime,
        path: str,
        answer_window_ms: Callable[[], int],
        *,
        stat: Stat = os.stat,
        safety_net_s: float = SAFETY_NET_S,
    ) -> None:
        """``answer_window_ms``: how long after it was seen a message is looked at for an
        answer (the verifier's ``turn_timeout_s``), so its look counts as open work."""
        self._db = db
        self._clock = clock
        self._window_ms = answer_window_ms
        self._safety_net_s = safety_net_s
        # a file to watch: not PostgreSQL, nor SQLite's in-memory database
        self._signature: Callable[[], Signature | None] | None = None
        if not is_postgres_url(path) and file_signature(path, stat)[0] is not None:
            self._signature = functools.partial(file_signature, path, stat)
        self._seen: Signature | None = None
        self._looked_at = -math.inf
        self.changes = 0  # changes seen so far: a job's own "anything new since I read?"
        self._looked_for = -1  # the change the last look's answer was for
        self._looking: Deferred[None] | None = None
        self._quiet_until = 0.0  # seconds on the clock; 0: busy, inf: until a change

    def configure(self, config: Config) -> None:
        """A reload's ``turn_timeout_s``: the verifier's answer window, from the next look."""
        window_ms = int(config.turn_timeout_s * 1000)
        self._window_ms = lambda: window_ms

    @property
    def watching(self) -> bool:
        """Whether writes can be seen without SQL at all (else the gate is never quiet)."""
        return self._signature is not None

    def watch(self, changes: Callable[[], Signature | None]) -> None:
        """Where no file shows a write (PostgreSQL): ``changes`` says what has been heard
        of the writes so far; None while they cannot be heard (the gate stays busy)."""
        self._signature = changes

    @property
    def quiet(self) -> bool:
        """Nothing can be due: no change since a look that found no work due by now."""
        return self._clock.seconds() < self._quiet_until

    def changed_since(self, seen: int) -> bool:
        """Whether a write may have come since :attr:`changes` was ``seen``."""
        return not self.watching or self.changes != seen

    def tick(self) -> None:
        """Compare the files with the last tick's; on a change (or the safety net), busy
        at once and one read to look again.  First on every tick."""
        if self._signature is None:
            return
        now = self._clock.seconds()
        signature = self._signature()
        if signature is None:  # a write may go unheard: busy, and the jobs read
            self._seen, self._quiet_until = None, 0.0
            self.changes += 1
            return
        due = 0 < self._quiet_until <= now  # an owed reply's step: look again after it
        changed = due or signature != self._seen
        if changed or now - self._looked_at >= self._safety_net_s:
            self._seen = signature
            self._looked_at = now
            self.changes += 1
            if changed:  # busy at once; the safety net's look alone makes it busy, if due
                self._quiet_until = 0.0
        if self._looking is None and self._looked_for != self.changes:
            self._looking = Deferred.fromCoroutine(self._look(self.changes))
            self._looking.addErrback(self._look_failed)
            self._looking.addBoth(self._looked)

    async def _look(self, change: int) -> None:
        now_ms = int(self._clock.seconds() * 1000)
        due_ms = await self._db.read(SwarmRepository.timed_work_at, now_ms - self._window_ms())
        if change != self.changes:
            return  # a write came meanwhile: the next tick looks again
        self._looked_for = change
        if due_ms is not None and due_ms <= now_ms:
            due_ms = 0  # due already (a retry's time passed): busy until a change, no looks
        self._quiet_until = math.inf if due_ms is None else due_ms / 1000

    def _look_failed(self, failure: object) -> None:
        """Busy it stays (the jobs read, and say what fails); the next tick looks again."""
        log.debug("quiet tick: could not look for due work: {f}", f=failure)

    def _looked(self, _: object) -> None:
        self._looking = None


def unless_quiet(gate: QuietGate, job: Callable[[], object]) -> Callable[[], object]:
    """``job``, skipped on the ticks the gate is quiet."""

    def run() -> object:
        return None if gate.quiet else job()

    return run


def on_change(gate: QuietGate, job: Callable[[], object]) -> Callable[[], object]:
    """``job``, run only when a write may have come since its last run (every time where
    the gate watches no file)."""
    ran_at = [-1]

    def run() -> object:
        if not gate.changed_since(ran_at[0]):
            return None
        ran_at[0] = gate.changes
        return job()

    return run


class Hurried(Protocol):
    """What waits less once work is open (opencode's probe: see
    :class:`~pigeond.delivery.reachability.OpencodeReachability`)."""

    def hurry(self) -> None: ...


def hurry_unless_quiet(gate: QuietGate, waiting: Hurried) -> None:
    """A tick's call: once the gate is busy (a write, open work), ``waiting`` hurries."""
    if not gate.quiet:
        waiting.hurry()
