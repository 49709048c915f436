"""The periodic job that keeps history from growing without bound.

Every ``interval_s`` (a minute; an hour while nothing is written) it deletes done
messages older than ``retention_days`` (storage/retention.py says what is done, and why
``updated_at`` is a row's age): at most ``max_batches`` batches of
``batch_rows`` rows, then at most ``max_vacuum_steps`` times ``vacuum_pages``
free pages given back to the file system.  It runs on its own ``LoopingCall``
on the injected clock, never inside the arbiter's tick, and hands the reactor
back between steps, so even a large backlog (the first start after months of
history) makes a request or a hand-off wait for one short transaction at most;
the backlog is worked off over the following runs.  ``retention_days = 0``
keeps everything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall, deferLater
from twisted.logger import Logger

from pigeond.config import Config
from pigeond.storage.database import Database
from pigeond.storage.errors import StorageUnavailable
from pigeond.storage.repository import SwarmRepository
from pigeond.storage.retention import PruneCounts, cutoff_ms

log = Logger()

# While the daemon is idle (nothing written since the last look: the quiet tick), a run
# comes this often instead: rows age into the retention cutoff by the clock alone, and
# pruning them an hour late costs nothing, while a run a minute wakes a database thread.
IDLE_INTERVAL_S = 3600.0


@dataclass
class PruneRun:
    """What one run removed, by (scope, state), and how many pages went back to the disk."""

    pruned: PruneCounts = field(default_factory=Counter)
    pages_given_back: int = 0

    @property
    def total(self) -> int:
        return sum(self.pruned.values())


class Pruner:
    def __init__(
        self,
        db: Database,
        clock: IReactorTime,
        *,
        retention_days: float,
        interval_s: float = 60.0,
        batch_rows: int = 500,
        max_batches: int = 4,
        vacuum_pages: int = 512,
        max_vacuum_steps: int = 4,
        idle: Callable[[], bool] = lambda: False,
    ) -> None:
        """``idle``: whether nothing was written since the last look (then a run comes
        every IDLE_INTERVAL_S, not every ``interval_s``)."""
        self._db = db
        self._idle = idle
        self._last_run = -IDLE_INTERVAL_S
        self._clock = clock
        self.retention_days = retention_days
        self._interval_s = interval_s
        self._batch_rows = batch_rows
        self._max_batches = max_batches
        self._vacuum_pages = vacuum_pages
        self._max_vacuum_steps = max_vacuum_steps
        self._loop = LoopingCall(self._scheduled)
        self._loop.clock = clock
        self._pause: Deferred[None] | None = None
        self._stopping = False

    @property
    def running(self) -> bool:
        return self._loop.running

    def start(self) -> None:
        self._stopping = False
        if not self._loop.running:
            self._loop.start(self._interval_s, now=False)
        log.info("{what}", what=self._describe())

    def stop(self) -> None:
        """Stop the loop; a run between two steps ends at once (the database may close next)."""
        self._stopping = True
        if self._loop.running:
            self._loop.stop()
        if self._pause is not None:
            self._pause.cancel()

    def configure(self, config: Config) -> None:
        """A new retention (a config reload), used from the next run on."""
        if config.retention_days != self.retention_days:
            self.retention_days = config.retention_days
            self._last_run = -IDLE_INTERVAL_S  # the next run applies it, idle or not
            log.info("{what}", what=self._describe())

    def _describe(self) -> str:
        if self.retention_days <= 0:
            return "retention_days = 0: keeping every message"
        return (
            f"pruning done messages older than {self.retention_days:g} days"
            f" every {self._interval_s:g} s"
        )

    def _scheduled(self) -> Deferred[None] | None:
        now = self._clock.seconds()
        if self._idle() and now - self._last_run < IDLE_INTERVAL_S:
            return None
        self._last_run = now
        return Deferred.fromCoroutine(self._run_logged())

    async def _run_logged(self) -> None:
        """One run, never raising: an exception would stop the LoopingCall for good."""
        try:
            done = await self.run()
        except CancelledError:
            return
        except StorageUnavailable as e:
            log.warn(
                "pruning skipped: {error}; trying again in {s:g} s",
                error=str(e), s=self._interval_s,
            )  # fmt: skip
            return
        except Exception:
            log.failure("pruning failed; trying again at the next run")
            return
        if done.total or done.pages_given_back:
            detail = ", ".join(
                f"{scope} {state} {n}" for (scope, state), n in sorted(done.pruned.items())
            )
            log.info(
                "pruned {n} done messages older than {days:g} days ({detail});"
                " {pages} free pages given back",
                n=done.total, days=self.retention_days, detail=detail or "none",
                pages=done.pages_given_back,
            )  # fmt: skip

    async def run(self) -> PruneRun:
        """Prune at most max_batches batches, then give back at most max_vacuum_steps
        steps of free pages, handing the reactor back before every step but the first."""
        done = PruneRun()
        if self.retention_days <= 0:
            return done
        cutoff = cutoff_ms(int(self._clock.seconds() * 1000), self.retention_days)
        for batch in range(self._max_batches):
            if batch and not await self._yield():
                return done
            pruned = await self._db.write(SwarmRepository.prune_batch, cutoff, self._batch_rows)
            done.pruned.update(pruned)
            if sum(pruned.values()) < self._batch_rows:
                break
        # threads whose messages are all pruned: one batch a run, as their rows are small
        await self._db.write(SwarmRepository.prune_threads, cutoff, self._batch_rows)
        for _ in range(self._max_vacuum_steps):
            if not await self._yield():
                return done
            given = await self._db.write(SwarmRepository.give_back_pages, self._vacuum_pages)
            done.pages_given_back += given
            if given < self._vacuum_pages:
                break
        return done

    async def _yield(self) -> bool:
        """Let the reactor serve others; False when the pruner was stopped meanwhile."""
        if self._stopping:
            return False
        self._pause = deferLater(self._clock, 0)
        try:
            await self._pause
        finally:
            self._pause = None
        return not self._stopping
