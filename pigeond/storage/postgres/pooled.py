"""Connections the operator tools borrow: one small pool per database URL, per process.

``pigeon-tui`` reads the database every second, each read in a worker thread "on its own
short-lived connection" (on SQLite, opening a file costs nothing).  On PostgreSQL a new
connection is a TCP or socket handshake, authentication and a new server process each
time: a second's refresh would cost the server a fork a second per screen.  So the
operator tools borrow a connection from a psycopg-pool pool kept for the process's life
(at most ``MAX_SIZE`` open, none kept past ``MAX_IDLE_S`` of disuse), and give it back
when the call is done; the pool checks a connection before lending it, so one
PostgreSQL closed meanwhile is replaced, not lent.  The daemon does not need this: each
of its threads keeps one connection for good (pigeond/storage/postgres/connection.py).
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Any, Final

import psycopg
from psycopg.types.string import StrDumper
from psycopg_pool import ConnectionPool

MAX_SIZE: Final = 4
MAX_IDLE_S: Final = 60.0
CONNECT_TIMEOUT_S: Final = 5.0

# The pool's own attempts are told through logging; the tools say one line themselves.
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())
logging.getLogger("psycopg.pool").propagate = False

_pools: dict[tuple[str, int | None], ConnectionPool[psycopg.Connection[tuple[Any, ...]]]] = {}
_lock = threading.Lock()


def shared_pool(
    url: str, lock_timeout_ms: int | None = None
) -> ConnectionPool[psycopg.Connection[tuple[Any, ...]]]:
    """This process's pool of connections to ``url``, made at the first call after one
    direct connection: a URL that cannot be reached fails at once with libpq's reason
    (psycopg.OperationalError), not after the pool's timeout."""
    key = (url, lock_timeout_ms)
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            psycopg.connect(url, connect_timeout=int(CONNECT_TIMEOUT_S)).close()

            def configure(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
                conn.adapters.register_dumper(str, StrDumper)
                if lock_timeout_ms is not None:
                    conn.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")

            pool = ConnectionPool(
                url, min_size=0, max_size=MAX_SIZE, max_idle=MAX_IDLE_S,
                kwargs={"autocommit": True, "connect_timeout": int(CONNECT_TIMEOUT_S),
                        "application_name": "pigeon"},
                configure=configure, check=ConnectionPool.check_connection,
                timeout=CONNECT_TIMEOUT_S, open=True, name="pigeon",
            )  # fmt: skip
            _pools[key] = pool
        return pool


@atexit.register
def _close_pools() -> None:
    with _lock:
        for pool in _pools.values():
            pool.close(timeout=1.0)
        _pools.clear()
