"""Every query and state change on ``swarm_messages``.

The daemon, the CLIs and the operator TUI share this class, so each state
transition is written once.  Times are passed in as unix milliseconds: the
repository never reads a clock.  Writes run in short ``BEGIN IMMEDIATE``
transactions, which serialise with other writers on the same file (an
operator tool, a second connection) through SQLite's lock and busy timeout.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import ParamSpec, TypeVar

from pigeond.model import NewMessage, State, StoredMessage
from pigeond.storage.errors import StorageUnavailable
from pigeond.storage.schema import PRIORITY_RANK_SQL

_COLUMNS = (
    "msg_id, from_session, to_session, channel, kind, priority, reply_to, payload, state,"
    " attempts, next_retry_at, created_at, updated_at, handed_off_at, last_error,"
    " accept_seq, handoff_seq"
)

READY_TARGETS_SQL = (
    "SELECT DISTINCT to_session FROM swarm_messages"
    " WHERE state = 'queued' AND next_retry_at <= ? AND to_session IS NOT NULL"
)


class AcceptOutcome(Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"


@dataclass(frozen=True, slots=True)
class InboxPage:
    messages: list[StoredMessage]
    has_more: bool


def _row_to_message(row: tuple[object, ...]) -> StoredMessage:
    return StoredMessage(*row)  # type: ignore[arg-type]


P = ParamSpec("P")
R = TypeVar("R")


def _reads(method: Callable[P, R]) -> Callable[P, R]:
    """A read that hits a locked, vanished or broken file raises StorageUnavailable."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except sqlite3.OperationalError as e:
            raise StorageUnavailable(f"database read failed: {e}") from e

    return wrapper


class SwarmRepository:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One durable write transaction; storage failures become StorageUnavailable."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise StorageUnavailable(f"database unavailable: {e}") from e
        try:
            yield self._conn
            self._conn.execute("COMMIT")
        except sqlite3.OperationalError as e:
            self._rollback()
            raise StorageUnavailable(f"database write failed: {e}") from e
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def _next_sequence(self, conn: sqlite3.Connection, name: str) -> int:
        row = conn.execute(
            "UPDATE swarm_sequences SET value = value + 1 WHERE name = ? RETURNING value", (name,)
        ).fetchone()
        return int(row[0])

    # -- sending -----------------------------------------------------------

    def accept(self, message: NewMessage, now_ms: int) -> AcceptOutcome:
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
            seq = self._next_sequence(conn, "accept")
            conn.execute(
                "INSERT INTO swarm_messages (msg_id, from_session, to_session, channel, kind,"
                " priority, reply_to, payload, state, attempts, next_retry_at, created_at,"
                " updated_at, accept_seq)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', 0, ?, ?, ?, ?)",
                (
                    message.msg_id,
                    message.from_session,
                    message.to_session,
                    message.channel,
                    message.kind,
                    message.priority,
                    message.reply_to,
                    message.payload,
                    now_ms,
                    now_ms,
                    now_ms,
                    seq,
                ),
            )
            return AcceptOutcome.STORED

    # -- reading -----------------------------------------------------------

    def _get(self, conn: sqlite3.Connection, msg_id: str) -> StoredMessage | None:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM swarm_messages WHERE msg_id = ?", (msg_id,)
        ).fetchone()
        return None if row is None else _row_to_message(row)

    @_reads
    def get(self, msg_id: str) -> StoredMessage | None:
        return self._get(self._conn, msg_id)

    @_reads
    def count_by_state(self) -> dict[str, int]:
        """Counts of direct messages by state; channel messages are not counted."""
        rows = self._conn.execute(
            "SELECT state, COUNT(*) FROM swarm_messages WHERE to_session IS NOT NULL GROUP BY state"
        ).fetchall()
        return {str(state): int(n) for state, n in rows}

    # -- the arbiter's queries ---------------------------------------------

    @_reads
    def ready_targets(self, now_ms: int) -> list[str]:
        """Targets with at least one queued message due at ``now_ms``."""
        return [r[0] for r in self._conn.execute(READY_TARGETS_SQL, (now_ms,)).fetchall()]

    def explain_ready_targets(self, now_ms: int) -> list[str]:
        """The query plan of :meth:`ready_targets`, one detail string per step."""
        rows = self._conn.execute("EXPLAIN QUERY PLAN " + READY_TARGETS_SQL, (now_ms,))
        return [str(r[3]) for r in rows.fetchall()]

    @_reads
    def queue_head(self, target: str) -> StoredMessage | None:
        """The queued message that goes to ``target`` next: priority, then accept order.

        The head is returned even when it is not due yet: a message waiting out
        its backoff holds the messages behind it, so order is kept.
        """
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM swarm_messages"
            " WHERE to_session = ? AND state = 'queued'"
            f" ORDER BY {PRIORITY_RANK_SQL}, accept_seq LIMIT 1",
            (target,),
        ).fetchone()
        return None if row is None else _row_to_message(row)

    # -- state changes -----------------------------------------------------

    def mark_handed_off(self, msg_id: str, now_ms: int) -> bool:
        """queued → handed_off, taking the next hand-off sequence number."""
        with self._write() as conn:
            if not self._is_queued(conn, msg_id):
                return False
            seq = self._next_sequence(conn, "handoff")
            conn.execute(
                "UPDATE swarm_messages SET state = 'handed_off', handed_off_at = ?,"
                " updated_at = ?, next_retry_at = NULL, last_error = NULL, handoff_seq = ?"
                " WHERE msg_id = ?",
                (now_ms, now_ms, seq, msg_id),
            )
            return True

    def record_failed_attempt(
        self, msg_id: str, error: str, now_ms: int, retry_at_ms: int | None
    ) -> bool:
        """Count one failed attempt; retry at ``retry_at_ms``, or fail for good when None."""
        with self._write() as conn:
            if not self._is_queued(conn, msg_id):
                return False
            if retry_at_ms is None:
                conn.execute(
                    "UPDATE swarm_messages SET state = 'failed', attempts = attempts + 1,"
                    " last_error = ?, next_retry_at = NULL, updated_at = ? WHERE msg_id = ?",
                    (error, now_ms, msg_id),
                )
            else:
                conn.execute(
                    "UPDATE swarm_messages SET attempts = attempts + 1, last_error = ?,"
                    " next_retry_at = ?, updated_at = ? WHERE msg_id = ?",
                    (error, retry_at_ms, now_ms, msg_id),
                )
            return True

    def _is_queued(self, conn: sqlite3.Connection, msg_id: str) -> bool:
        row = conn.execute("SELECT state FROM swarm_messages WHERE msg_id = ?", (msg_id,))
        found = row.fetchone()
        return found is not None and found[0] == State.QUEUED

    # -- the inbox ---------------------------------------------------------

    @_reads
    def inbox_page(self, session: str, after_seq: int, limit: int) -> InboxPage:
        """Messages handed off to ``session`` after hand-off number ``after_seq``."""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM swarm_messages"
            " WHERE to_session = ? AND handoff_seq > ? AND state = 'handed_off'"
            " ORDER BY handoff_seq LIMIT ?",
            (session, after_seq, limit + 1),
        ).fetchall()
        messages = [_row_to_message(r) for r in rows[:limit]]
        return InboxPage(messages=messages, has_more=len(rows) > limit)

    @_reads
    def handoff_seq_of(self, msg_id: str) -> int | None:
        row = self._conn.execute(
            "SELECT handoff_seq FROM swarm_messages WHERE msg_id = ?", (msg_id,)
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    @_reads
    def last_handoff_seq(self) -> int:
        row = self._conn.execute(
            "SELECT value FROM swarm_sequences WHERE name = 'handoff'"
        ).fetchone()
        return int(row[0])
