"""Immediate dispatch across hosts, and writes noticed without SQL: ``LISTEN``/``NOTIFY``
on PostgreSQL.

A send accepted by one daemon for a session of another host's opencode would wait for
that host's next tick.  So an accept on PostgreSQL also says ``NOTIFY pigeond_due`` with
each target that got a message (in the accept's own transaction: PostgreSQL delivers
it at the commit, never for a send that was not stored), and every daemon listens on a
connection of its own and kicks its arbiter for each target it hears of; the arbiter's
routing lets only the daemon whose opencode has the target deliver.  The tick stays the
safety net: a notification missed while the connection was down is found by it.

Every write transaction also says ``NOTIFY pigeond_changed`` (pigeond/storage/base.py):
:attr:`DueListener.heard` counts them, so the quiet tick (pigeond/service/quiet.py) knows
without SQL that nothing was written, as the file's stat tells it on SQLite.  The thread
sleeps in ``select`` on the connection (and a pipe that wakes it to stop), never on a
timer: an idle daemon's listener never wakes.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable
from typing import Final

import psycopg
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger

from pigeond.db_url import redacted
from pigeond.storage.postgres.schema import CHANGED_CHANNEL
from pigeond.storage.postgres.schema import DUE_CHANNEL as CHANNEL

# The wait before connecting again after the connection was lost.
RECONNECT_S: Final = 2.0
STOP_JOIN_S: Final = 3.0

log = Logger()


class DueListener:
    """Listens for ``pigeond_due`` and ``pigeond_changed`` on its own connection, in a
    thread of its own: calls ``on_due(target)`` on the reactor for each due target, and
    counts the changes in :attr:`heard`."""

    def __init__(
        self, url: str, reactor: IReactorFromThreads, on_due: Callable[[str], None]
    ) -> None:
        self._url = url
        self._reactor = reactor
        self._on_due = on_due
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="pigeond-listen", daemon=True)
        self.listening = threading.Event()
        # writes heard so far, and one more at each (re)connection (what was written while
        # no one listened): only this thread adds to it
        self.heard = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=STOP_JOIN_S)
        if not self._thread.is_alive():
            os.close(self._wake_r)
            os.close(self._wake_w)

    def changes(self) -> tuple[int] | None:
        """What the quiet tick compares from one tick to the next: the writes heard, or
        None while not listening (then a write may go unheard)."""
        return (self.heard,) if self.listening.is_set() else None

    def _run(self) -> None:
        lost = False  # the connection was lost (said once; its return is said too)
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {CHANGED_CHANNEL}")
                    conn.execute(f"LISTEN {CHANNEL}")  # last: what pg_stat_activity shows
                    self.heard += 1  # what came before the LISTEN: the tick looks again
                    if lost:
                        self._reactor.callFromThread(
                            log.info, "listening for sends on {db} again", db=redacted(self._url)
                        )
                    lost = False
                    self.listening.set()
                    self._listen(conn)
            except psycopg.Error as e:
                self.listening.clear()
                if not lost:
                    text = " ".join(str(e).split())
                    self._reactor.callFromThread(
                        log.warn, "not listening for sends on {db}: {error}; the tick delivers",
                        db=redacted(self._url), error=text,
                    )  # fmt: skip
                lost = True
                self._stop.wait(RECONNECT_S)
        self.listening.clear()

    def _listen(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        """Until stopped: sleep until the server sends something, then take every
        notification it sent (a lost connection raises)."""
        while not self._stop.is_set():
            for note in conn.notifies(timeout=0):  # those already read come first
                if note.channel == CHANGED_CHANNEL:
                    self.heard += 1
                else:
                    self._reactor.callFromThread(self._on_due, note.payload)
            ready, _, _ = select.select([conn.fileno(), self._wake_r], [], [])
            if self._wake_r in ready:
                return
