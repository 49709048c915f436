"""Every query and state change on ``swarm_messages``.

The daemon, the CLIs and the operator TUI share this class, so each state
transition is written once.  Times are passed in as unix milliseconds: the
repository never reads a clock.  Writes run in short ``BEGIN IMMEDIATE``
transactions, which serialise with other writers on the same file (an
operator tool, a second connection) through SQLite's lock and busy timeout.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from enum import Enum

from pigeond.model import NewMessage, StoredMessage
from pigeond.storage.base import COLUMNS, reads, row_to_message
from pigeond.storage.delivery import DEFAULT_NOTICE_TTL_MS, DeliveryTransitions
from pigeond.storage.operator import OperatorActions


class AcceptOutcome(Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"


@dataclass(frozen=True, slots=True)
class InboxPage:
    messages: list[StoredMessage]
    has_more: bool


class SwarmRepository(DeliveryTransitions, OperatorActions):
    def __init__(
        self, conn: sqlite3.Connection, *, notice_ttl_ms: int = DEFAULT_NOTICE_TTL_MS
    ) -> None:
        super().__init__(conn)
        self.notice_ttl_ms = notice_ttl_ms

    # -- sending -----------------------------------------------------------

    def accept(
        self, message: NewMessage, now_ms: int, expires_at: int | None = None
    ) -> AcceptOutcome:
        """Store a new message as queued and due now, unless its msg_id exists.

        The same msg_id with the same content is a retried send (DUPLICATE,
        nothing written); with other content it is a CONFLICT.
        """
        with self._write() as conn:
            existing = self._get(conn, message.msg_id)
            if existing is not None:
                if message.same_content(existing):
                    return AcceptOutcome.DUPLICATE
                return AcceptOutcome.CONFLICT
            self._insert(
                conn, msg_id=message.msg_id, from_session=message.from_session,
                to_session=message.to_session, channel=message.channel, kind=message.kind,
                priority=message.priority, reply_to=message.reply_to, payload=message.payload,
                now_ms=now_ms, expires_at=expires_at,
            )  # fmt: skip
            return AcceptOutcome.STORED

    # -- reading -----------------------------------------------------------

    @reads
    def get(self, msg_id: str) -> StoredMessage | None:
        return self._get(self._conn, msg_id)

    @reads
    def count_by_state(self) -> dict[str, int]:
        """Counts of direct messages by state; channel messages are not counted."""
        rows = self._conn.execute(
            "SELECT state, COUNT(*) FROM swarm_messages WHERE to_session IS NOT NULL GROUP BY state"
        ).fetchall()
        return {str(state): int(n) for state, n in rows}

    # -- the inbox ---------------------------------------------------------

    @reads
    def inbox_page(self, session: str, after_seq: int, limit: int) -> InboxPage:
        """Messages handed off to ``session`` after hand-off number ``after_seq``."""
        rows = self._conn.execute(
            f"SELECT {COLUMNS} FROM swarm_messages"
            " WHERE to_session = ? AND handoff_seq > ? AND state = 'handed_off'"
            " ORDER BY handoff_seq LIMIT ?",
            (session, after_seq, limit + 1),
        ).fetchall()
        messages = [row_to_message(r) for r in rows[:limit]]
        return InboxPage(messages=messages, has_more=len(rows) > limit)

    @reads
    def last_handoff_seq(self) -> int:
        row = self._conn.execute("SELECT value FROM swarm_sequences WHERE name = 'handoff'")
        return int(row.fetchone()[0])
