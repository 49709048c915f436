"""The expiry sweep: queued direct messages whose time to live ran out become
``expired`` (and their senders get a ``delivery.failed`` notice, in the same
transaction: see storage/delivery.py).

A periodic job of its own, beside the arbiter's tick: expiring needs no opencode, so it
runs whether opencode answers or not, and a slow sweep never delays a hand-off.  The
arbiter skips expired messages anyway (``ready_batch`` leaves them out), so the sweep
only has to come soon, not first.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.database import Database

log = Logger()


class ExpirySweeper:
    def __init__(self, db: Database, clock: IReactorTime) -> None:
        self._db = db
        self._clock = clock
        self._last_error: str | None = None

    def sweep(self) -> Deferred[None]:
        """One sweep; never fails (what fails is said here, once, not by the tick)."""
        return Deferred.fromCoroutine(self._sweep())

    async def _sweep(self) -> None:
        try:
            expired = await self._db.write(
                SwarmRepository.expire_due, int(self._clock.seconds() * 1000)
            )
        except StorageError as e:
            if str(e) != self._last_error:  # a full disk fails every sweep: say it once
                log.error("expiry sweep: {error}; trying again every tick", error=str(e))
            self._last_error = str(e)
            return
        except Exception:
            log.failure("expiry sweep failed; trying again next tick")
            return
        self._last_error = None
        for msg_id in expired:
            log.warn("{msg_id} expired before it could be delivered", msg_id=msg_id)
