"""Immediate dispatch across hosts: ``LISTEN``/``NOTIFY`` on PostgreSQL.

A send accepted by one daemon for a session of another host's opencode would wait for
that host's next tick.  So an accept on PostgreSQL also says ``NOTIFY pigeond_due`` with
each target that got a message (in the accept's own transaction: PostgreSQL delivers
it at the commit, never for a send that was not stored), and every daemon listens on a
connection of its own and kicks its arbiter for each target it hears of; the arbiter's
routing lets only the daemon whose opencode has the target deliver.  The tick stays the
safety net: a notification missed while the connection was down is found by it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

import psycopg
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger

from pigeond.db_url import redacted
from pigeond.storage.postgres.schema import DUE_CHANNEL as CHANNEL

# How long one wait for notifications lasts before the stop flag is looked at again,
# and the wait before connecting again after the connection was lost.
WAIT_S: Final = 0.5
RECONNECT_S: Final = 2.0

log = Logger()


class DueListener:
    """Listens for ``pigeond_due`` on its own connection, in a thread of its own, and calls
    ``on_due(target)`` on the reactor for each notification."""

    def __init__(
        self, url: str, reactor: IReactorFromThreads, on_due: Callable[[str], None]
    ) -> None:
        self._url = url
        self._reactor = reactor
        self._on_due = on_due
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pigeond-listen", daemon=True)
        self.listening = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * WAIT_S + 1)

    def _run(self) -> None:
        lost = False  # the connection was lost (said once; its return is said too)
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if lost:
                        self._reactor.callFromThread(
                            log.info, "listening for sends on {db} again", db=redacted(self._url)
                        )
                    lost = False
                    self.listening.set()
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=WAIT_S):
                            self._reactor.callFromThread(self._on_due, note.payload)
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
