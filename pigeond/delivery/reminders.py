"""The owed-replies sweep: reminders to debtors, then notices to creditors.

A periodic job of its own, like the expiry sweep: it needs no opencode (the reminder
and the notice are queued messages, delivered as any other), and a slow sweep never
delays a hand-off.  Each run first asks, with a read, whether any step is due; only
then does it write (one transaction for every step it takes), so a daemon with
obligations that are not due takes no write lock for them.  The sessions it queued a
reminder or notice for are kicked at once rather than waiting for the next tick.
Storage says what each step is (pigeond/storage/obligations.py).
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.database import Database

log = Logger()


class ReminderSweep:
    def __init__(
        self, db: Database, clock: IReactorTime, kick: Callable[[str], None] = lambda t: None
    ) -> None:
        """``kick`` starts delivery to a session a reminder or notice was queued for."""
        self._db = db
        self._clock = clock
        self._kick = kick
        self._last_error: str | None = None

    def sweep(self) -> Deferred[None]:
        """One sweep; never fails (a failure would stop its TimerService for good)."""
        return Deferred.fromCoroutine(self._sweep())

    async def _sweep(self) -> None:
        now_ms = int(self._clock.seconds() * 1000)
        try:
            if not await self._db.read(SwarmRepository.obligations_due, now_ms):
                self._last_error = None
                return
            done = await self._db.write(SwarmRepository.sweep_obligations, now_ms)
        except StorageError as e:
            if str(e) != self._last_error:  # a full disk fails every sweep: say it once
                log.error("owed-replies sweep: {error}; trying again", error=str(e))
            self._last_error = str(e)
            return
        except Exception:
            log.failure("owed-replies sweep failed; trying again")
            return
        self._last_error = None
        if done.reminded or done.overdue or done.cancelled:
            log.info(
                "owed replies: {reminded} reminded, {overdue} overdue, {cancelled} cancelled",
                reminded=done.reminded, overdue=done.overdue, cancelled=done.cancelled,
            )  # fmt: skip
        for target in dict.fromkeys(done.targets):
            self._kick(target)
