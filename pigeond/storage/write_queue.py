"""The writer thread's queue: the writes that a 202 or a hand-off waits on go first.

One connection writes, one transaction at a time, so a write waits for every write
queued before it.  Most of them are bookkeeping of hand-offs already made (verified,
answered, turns counted, routes seen), which nobody waits on.  When writes are dear (on
PostgreSQL each statement is a round trip to a server process that shares a busy CPU
with pigeond, 2-9 ms a transaction) that queue grew to tens of milliseconds, and an
accept's commit, then its hand-off's intent, each waited all of it: most of the time
from accept to hand-off.  So an *urgent* write (an accept group,
pigeond/storage/group_commit.py, or a call marked with :func:`urgent`) goes before the
others queued; at most :data:`URGENT_IN_A_ROW` of them in a row while another waits,
so the bookkeeping still goes.

Nothing else changes: every write commits on the one connection before its Deferred
fires, in order within each kind.  Writes queued at the same moment never had an order
between them that a caller could see: each caller waits for a write before it asks for
one that depends on it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Final, ParamSpec, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads
from twisted.python.failure import Failure

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])

URGENT_IN_A_ROW: Final = 2
_URGENT_MARK: Final = "_pigeond_urgent_write"


def urgent(call: F) -> F:
    """Mark a write call as one a hand-off waits on: it goes before queued bookkeeping."""
    setattr(call, _URGENT_MARK, True)
    return call


def is_urgent(call: Callable[..., Any]) -> bool:
    return bool(getattr(call, _URGENT_MARK, False))


Job = Callable[[], None]


class WriteQueue:
    """One thread running the writes it is given, urgent ones first (see the module)."""

    def __init__(self, reactor: IReactorFromThreads, name: str) -> None:
        self._reactor = reactor
        self._urgent: deque[Job] = deque()
        self._other: deque[Job] = deque()
        self._urgent_run = 0  # urgent writes run in a row while another waited
        self._ready = threading.Condition()
        self._stopping = False
        # a daemon thread: an exit without stop() still exits (a write cut off there was
        # never committed, and no 202 went out for it)
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(
        self, urgent: bool, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs
    ) -> Deferred[R]:
        """Run ``call`` on the writer thread; its result (or failure) on the reactor."""
        answer: Deferred[R] = Deferred()

        def job() -> None:
            try:
                result = call(*args, **kwargs)
            except BaseException:
                failure = Failure()
                self._reactor.callFromThread(answer.errback, failure)
            else:
                self._reactor.callFromThread(answer.callback, result)

        with self._ready:
            (self._urgent if urgent else self._other).append(job)
            self._ready.notify()
        return answer

    def stop(self) -> None:
        """Run what was asked, then end the thread (blocks until it has)."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _next(self) -> Job | None:
        """The next job (holding the lock): urgent first, within the limit in a row."""
        if self._urgent and (not self._other or self._urgent_run < URGENT_IN_A_ROW):
            self._urgent_run = self._urgent_run + 1 if self._other else 0
            return self._urgent.popleft()
        self._urgent_run = 0
        return self._other.popleft() if self._other else None

    def _work(self) -> None:
        while True:
            with self._ready:
                job = self._next()
                while job is None:
                    if self._stopping:
                        return
                    self._ready.wait()
                    job = self._next()
            job()
