"""An accept's reads, asked together before any is read.

Storing a send reads three things first: whether its msg_id is taken, how full its target's
queue is (with a cap) and the names its sender and target hold.  None depends on another,
so all three are asked before the first is read: on PostgreSQL, where the write
transaction is one pipeline (pigeond/storage/postgres/connection.py), they go in one round
trip instead of three, and the group's first accept brings the accept sequence's number
along.  On SQLite a statement runs when asked, so nothing changes there.  A read whose
answer turns out not to matter (the msg_id was taken) costs its statement, never a trip.
"""

from __future__ import annotations

from dataclasses import dataclass

from pigeond.model import NewMessage, StoredMessage
from pigeond.storage.base import COLUMNS, QUEUED_FOR_TARGET_SQL, row_to_message
from pigeond.storage.engines.base import Connection, Cursor
from pigeond.storage.names import HELD_NAMES_SQL, names_from


@dataclass(frozen=True, slots=True)
class AcceptReads:
    """The reads of one accept, asked; each answer read when the accept needs it."""

    message: NewMessage
    cap: int
    _existing: Cursor
    _queued: Cursor | None
    _names: Cursor

    def existing(self) -> StoredMessage | None:
        """The message already stored under this msg_id, if any."""
        row = self._existing.fetchone()
        return None if row is None else row_to_message(row)

    def target_full(self) -> bool:
        """Whether the target already holds its cap of queued messages (no cap: never)."""
        return self._queued is not None and int(self._queued.fetchone()[0]) >= self.cap

    def names(self) -> tuple[str | None, str | None]:
        """The names the sender and the target hold now (None for none)."""
        return names_from(
            self._names.fetchall(), self.message.from_session, self.message.to_session
        )


def ask_accept_reads(conn: Connection, message: NewMessage, cap: int) -> AcceptReads:
    """Ask an accept's three reads of ``conn``, inside its write transaction."""
    target = message.to_session
    existing = conn.execute(
        f"SELECT {COLUMNS} FROM swarm_messages WHERE msg_id = ?", (message.msg_id,)
    )
    queued = None
    if cap > 0 and target is not None:
        queued = conn.execute(QUEUED_FOR_TARGET_SQL, {"target": target, "limit": cap})
    names = conn.execute(HELD_NAMES_SQL, (message.from_session, target))
    return AcceptReads(message, cap, existing, queued, names)
