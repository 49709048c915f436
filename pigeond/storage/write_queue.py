"""The writer thread's queue: the writes that a 202 or a hand-off waits on go first, and
bookkeeping queued together shares one commit.

One connection writes, one transaction at a time, so a write waits for every write
queued before it.  Most of them are bookkeeping of hand-offs already made (verified,
answered, turns counted, routes seen), which nobody waits on.  When writes are dear (on
PostgreSQL each statement is a round trip to a server process that shares a busy CPU
with pigeond, 2-9 ms a transaction) that queue grew to tens of milliseconds, and an
accept's commit, then its hand-off's intent, each waited all of it: most of the time
from accept to hand-off.  So:

- an *urgent* write (an accept group, pigeond/storage/group_commit.py, or a call marked
  ``urgent``, pigeond/storage/write_marks.py) goes before the others queued; at most
  :data:`URGENT_IN_A_ROW` of them in a row while another waits, so the bookkeeping
  still goes;
- bookkeeping marked ``shares_commit`` that is queued back to back runs in one
  transaction and one commit (at most :data:`MAX_SHARED` calls): under load a commit per
  call was most of the writer's time on PostgreSQL (its ``BEGIN``, ``COMMIT`` and the
  WAL's flush), and an fsync each on SQLite.  Each call's answer still comes only after
  the commit that holds its writes.  If the shared transaction fails at all (one call
  raised, a statement failed, the commit), it is rolled back whole and every call runs
  again alone, as it would have without sharing: one call's error stays its own.

Nothing else changes: every write commits on the one connection before its Deferred
fires, in order within each kind.  Writes queued at the same moment never had an order
between them that a caller could see: each caller waits for a write before it asks for
one that depends on it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, ParamSpec, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads
from twisted.python.failure import Failure

from pigeond.storage.write_marks import may_share_commit

P = ParamSpec("P")
R = TypeVar("R")

URGENT_IN_A_ROW: Final = 2
# Calls sharing one commit at most: each still costs its statements, and an urgent write
# that comes meanwhile waits for the whole transaction.
MAX_SHARED: Final = 16

# Runs the calls in one transaction and returns their results in order; raises (after
# rolling it back) if any call or the commit failed.
Together = Callable[[Sequence[Callable[[], object]]], Sequence[object]]


@dataclass(frozen=True, slots=True)
class _Write:
    call: Callable[[], object]
    answer: Deferred[Any]
    shares: bool


class WriteQueue:
    """One thread running the writes it is given, urgent ones first (see the module).
    ``together`` runs a run of ``shares_commit`` calls in one transaction; without
    it every write runs alone."""

    def __init__(
        self, reactor: IReactorFromThreads, name: str, *, together: Together | None = None
    ) -> None:
        self._reactor = reactor
        self._together = together
        self._urgent: deque[_Write] = deque()
        self._other: deque[_Write] = deque()
        self._urgent_run = 0  # urgent writes run in a row while another waited
        self._ready = threading.Condition()
        self._stopping = False
        self.shared_commits = 0  # transactions that held more than one call, for tests
        # a daemon thread: an exit without stop() still exits (a write cut off there was
        # never committed, and no 202 went out for it)
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(
        self,
        urgent: bool,
        call: Callable[P, R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Deferred[R]:
        """Run ``call`` on the writer thread; its result (or failure) on the reactor.  A
        call marked ``shares_commit`` may share its transaction (see the module)."""
        answer: Deferred[R] = Deferred()
        write = _Write(lambda: call(*args, **kwargs), answer, may_share_commit(call))
        with self._ready:
            (self._urgent if urgent else self._other).append(write)
            self._ready.notify()
        return answer

    def stop(self) -> None:
        """Run what was asked, then end the thread (blocks until it has)."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _next(self) -> list[_Write]:
        """The next writes to run (holding the lock): urgent first, within the limit in a
        row; else the oldest other, with the sharing calls queued right after it."""
        if self._urgent and (not self._other or self._urgent_run < URGENT_IN_A_ROW):
            self._urgent_run = self._urgent_run + 1 if self._other else 0
            return [self._urgent.popleft()]
        self._urgent_run = 0
        if not self._other:
            return []
        writes = [self._other.popleft()]
        if self._together is not None and writes[0].shares:
            while self._other and self._other[0].shares and len(writes) < MAX_SHARED:
                writes.append(self._other.popleft())
        return writes

    def _work(self) -> None:
        while True:
            with self._ready:
                writes = self._next()
                while not writes:
                    if self._stopping:
                        return
                    self._ready.wait()
                    writes = self._next()
            if len(writes) == 1:
                self._run_alone(writes[0])
            else:
                self._run_together(writes)

    def _run_alone(self, write: _Write) -> None:
        try:
            result = write.call()
        except BaseException:
            failure = Failure()
            self._reactor.callFromThread(write.answer.errback, failure)
        else:
            self._reactor.callFromThread(write.answer.callback, result)

    def _run_together(self, writes: list[_Write]) -> None:
        assert self._together is not None  # only then are writes taken together
        try:
            results = self._together([write.call for write in writes])
        except BaseException:
            # rolled back whole: each alone, as without sharing (see the module)
            for write in writes:
                self._run_alone(write)
            return
        self.shared_commits += 1
        for write, result in zip(writes, results, strict=True):
            self._reactor.callFromThread(write.answer.callback, result)
