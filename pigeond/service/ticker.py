"""One tick for every periodic job of the daemon: one wake-up of the event loop each
``tick_ms``, not one per job.

Each job used to have a timer of its own at the same interval; their timers never fell
due together, so an idle daemon woke up once per job per tick.  The :class:`Ticker`
calls them in the order they were added, on one ``LoopingCall``.  As with a timer of its
own, a job whose last run has not finished (its Deferred has not fired) is skipped, and
a job that raises is logged and called again next tick.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()


class Ticker:
    """Calls each added job on every tick, or once ``every_s`` has passed since its last."""

    def __init__(self, clock: IReactorTime, every_s: float) -> None:
        self._loop = LoopingCall(self.tick)
        self._loop.clock = clock
        self._clock = clock
        self.every_s = every_s
        self._jobs: list[tuple[str, float, Callable[[], object]]] = []
        self._next_at: dict[str, float] = {}
        self._running: dict[str, Deferred[Any]] = {}

    def add(self, name: str, job: Callable[[], object], every_s: float = 0.0) -> None:
        """Call ``job`` on every tick (the first included), or, with ``every_s`` longer than
        a tick, on the first tick once ``every_s`` has passed since its last call."""
        self._jobs.append((name, every_s, job))

    def start(self) -> None:
        if not self._loop.running:
            self._loop.start(self.every_s, now=True)

    def set_interval(self, every_s: float) -> None:
        """A new tick interval (a reload's ``tick_ms``), from the next tick on."""
        self.every_s = every_s
        if self._loop.running:
            self._loop.stop()
            self._loop.start(every_s, now=False)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def tick(self) -> None:
        now = self._clock.seconds()
        running, next_at = self._running, self._next_at
        for name, every_s, job in self._jobs:
            if running and name in running:
                continue
            if every_s:  # a job of its own pace: the first tick once it is due
                if now < next_at.get(name, now):
                    continue
                next_at[name] = now + every_s
            try:
                result = job()
            except Exception:
                log.failure("periodic job {name} failed; called again next tick", name=name)
                continue
            # an idle tick's jobs mostly answer None: no isinstance (an ABC's, slow) for it
            if result is not None and isinstance(result, Deferred) and not result.called:
                self._running[name] = result
                result.addErrback(self._failed, name)
                result.addBoth(self._ended, name)

    def _failed(self, failure: Failure, name: str) -> None:
        log.failure("periodic job {name} failed; called again next tick", failure, name=name)

    def _ended(self, _: object, name: str) -> None:
        self._running.pop(name, None)
