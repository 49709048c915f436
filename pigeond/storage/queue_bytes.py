"""The bound on what the queue may hold in bytes (``max_queued_bytes``), taken in the accept's
own transaction.

The per-target cap bounds a target's queue in messages; nothing else bounded the queue as a
whole, so a sender that spread its messages over many targets, or over a channel's members,
could fill the disk.  The queue's bytes are the payload bytes (UTF-8) of every message still
to be delivered: ``state = 'queued'``, which includes the ones a policy or a brake holds and
the ones waiting for their sender's proof.  A channel's own row (``fanned_out``, its history)
is not counted; each member's copy is.  An accept whose message (each copy counted) would take
the queue past the bound stores nothing (:attr:`AcceptOutcome.QUEUE_FULL`).

The queue's bytes are a number the database keeps (``swarm_queue_bytes``, kept in step by
triggers in the transaction of every write: pigeond/storage/queue_bytes_schema.py), read
once per transaction, at the first accept of a group commit that has a bound, and carried
forward in memory as the group's accepts are stored: one row read per commit, whatever the
queue holds.  (The sum over the queued rows it replaces cost 0.3 ms with 1,000 queued and
150 ms with 100,000: bench/queue_bytes_table.py.)  On PostgreSQL, where several daemons may
accept at once, the transaction first takes an advisory lock held to its end, so two
daemons' accepts cannot both fit under the bound the other's fills: they take turns, only
while a bound is on.
"""

from __future__ import annotations

from typing import Final

from pigeond.storage.engines import Engine, EngineSql, engine_of
from pigeond.storage.engines.base import Connection, Cursor

# The queue's bytes summed over its rows, as each engine counts a text's UTF-8 bytes
# (SQLite's length() of a text counts characters; of a blob, bytes): what the kept number
# must always equal (the tests compare them; the bench times the sum).
# The kept number (migration 24's triggers keep it).
QUEUED_BYTES_NOW_SQL: Final = "SELECT total FROM swarm_queue_bytes"
QUEUED_BYTES_SQL: Final = EngineSql(
    sqlite=(
        "SELECT COALESCE(SUM(length(CAST(payload AS BLOB))), 0) FROM swarm_messages"
        " WHERE state = 'queued'"
    ),
    postgres=(
        "SELECT COALESCE(SUM(octet_length(payload)), 0) FROM swarm_messages WHERE state = 'queued'"
    ),
)


def payload_bytes(payload: str) -> int:
    """What one copy of ``payload`` adds to the queue's bytes (as the database counts it)."""
    return len(payload.encode("utf-8", "surrogatepass"))


def summed_queued_bytes(conn: Connection) -> int:
    """The payload bytes of every message still to be delivered, summed over the rows."""
    return int(conn.execute(engine_of(conn).sql(QUEUED_BYTES_SQL)).fetchone()[0])


def queued_bytes(conn: Connection) -> int:
    """The payload bytes of every message still to be delivered, as the database keeps them."""
    return int(conn.execute(QUEUED_BYTES_NOW_SQL).fetchone()[0])


class QueueBytes:
    """The queue's bytes within one write transaction: read at the first accept that has a
    bound (after taking the engine's lock, where several daemons accept), then kept up to
    date as accepts store."""

    def __init__(self, conn: Connection, engine: Engine, *, bounded: bool = False) -> None:
        """``bounded``: some accept of the transaction has a bound, so the lock is taken
        and the number asked now, to be read with the first accept's reads."""
        self._conn = conn
        self._engine = engine
        self._total: int | None = None
        self._asked: Cursor | None = None
        if bounded:
            self._ask()

    def _ask(self) -> None:
        self._engine.lock_queue_bytes(self._conn)
        self._asked = self._conn.execute(QUEUED_BYTES_NOW_SQL)

    def fits(self, bound: int, adding: int) -> bool:
        """Whether ``adding`` bytes keep the queue within ``bound`` (0: no bound)."""
        if bound <= 0:
            return True
        if self._total is None:
            if self._asked is None:
                self._ask()
            assert self._asked is not None
            self._total = int(self._asked.fetchone()[0])
        return self._total + adding <= bound

    def stored(self, adding: int) -> None:
        """An accept of this transaction stored ``adding`` bytes of queued copies."""
        if self._total is not None:
            self._total += adding
