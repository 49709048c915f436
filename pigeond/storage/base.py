"""What every part of the repository shares: the columns, the engine, the write
transaction, errors."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from pigeond.ids import make_msg_id
from pigeond.model import (
    NOTICE_KIND,
    NOTICE_SENDER,
    SESSION_ID_RE,
    SenderClaim,
    SenderProof,
    StoredMessage,
)
from pigeond.storage.columns import COLUMNS as COLUMNS
from pigeond.storage.engines import engine_of
from pigeond.storage.engines.base import Connection as Connection
from pigeond.storage.engines.base import Cursor
from pigeond.storage.errors import UNAVAILABLE_ERRORS, StorageUnavailable

# How many messages wait for one target, counted no further than a limit: every
# accept with a queue cap counts inside its transaction (a direct message's target, each
# member of a channel), so the cost must not grow with the queue (a cap lowered by a
# reload, notices and requeues can leave it longer).  The plan is a SEARCH on a
# (to_session, state, ...) covering index.
# A message a brake holds for a person is not counted (pigeond/storage/brake_holds.py):
# they are counted apart (a SEARCH of the small partial idx_swarm_brake_held_target), the
# walk goes that many entries further and they are taken off, so it stays a walk of the
# covering index alone.
_BRAKE_HELD_FOR_TARGET_SQL = (
    "(SELECT COUNT(*) FROM swarm_messages"
    " WHERE to_session = :target AND hold_kind = 'brake' AND next_retry_at IS NULL)"
)
QUEUED_FOR_TARGET_SQL = (
    f"SELECT COUNT(*) - {_BRAKE_HELD_FOR_TARGET_SQL} FROM (SELECT 1 FROM swarm_messages"
    " WHERE to_session = :target AND state = 'queued'"
    f" LIMIT :limit + {_BRAKE_HELD_FOR_TARGET_SQL}) AS queued"
)
# A LIMIT that is no limit, as both engines take it (PostgreSQL refuses SQLite's -1).
NO_LIMIT = 2**62

# pigeond's own notices and reminders, and every insert that names no sender proof
UNVERIFIED_SENDER = SenderClaim(SenderProof.UNVERIFIED)
# pigeond's own notices and reminders: written here, so their sender is known (no request
# may claim the reserved "pigeond", pigeond/model.py is_reserved_sender).
NOTICE_SENDER_CLAIM = SenderClaim(SenderProof.VERIFIED, "pigeond's own notice")

P = ParamSpec("P")
R = TypeVar("R")


def row_to_message(row: tuple[object, ...]) -> StoredMessage:
    *fields, steer = row
    return StoredMessage(*fields, steer=bool(steer))  # type: ignore[arg-type]


def reads(method: Callable[P, R]) -> Callable[P, R]:
    """A read that hits a locked, vanished or broken file raises StorageUnavailable."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except UNAVAILABLE_ERRORS as e:
            raise StorageUnavailable(f"database read failed: {e}") from e

    return wrapper


class SharedWriteSpoiled(Exception):
    """A call inside :meth:`RepositoryBase.write_together` failed: the whole transaction
    is rolled back (its caller runs each call alone)."""


class _Together:
    """The one transaction :meth:`RepositoryBase.write_together` runs, and whether one of
    its calls failed."""

    def __init__(self) -> None:
        self.spoiled = False


class RepositoryBase:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._together: _Together | None = None  # write_together's, while it runs
        # SQLite or PostgreSQL: each query the engines cannot share is asked of it
        self.engine = engine_of(conn)
        self._search_upkeep = False  # whether the schema has the search index yet

    @property
    def connection(self) -> Connection:
        return self._conn

    @property
    def sqlite_connection(self) -> sqlite3.Connection:
        """The connection as the ``sqlite3.Connection`` it is, for what only SQLite has
        (pragmas, backups, bulk loaders); TypeError on PostgreSQL."""
        if not isinstance(self._conn, sqlite3.Connection):
            raise TypeError("this is a PostgreSQL database, not a SQLite file")
        return self._conn

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One durable write transaction; storage failures become StorageUnavailable.
        Inside :meth:`write_together` it is a part of that one transaction instead."""
        if self._together is not None:
            try:
                yield self._conn
            except BaseException:
                self._together.spoiled = True  # even if its caller catches it
                raise
            return
        try:
            self._conn.execute(self.engine.begin_write)
        except UNAVAILABLE_ERRORS as e:
            raise StorageUnavailable(f"database unavailable: {e}") from e
        try:
            yield self._conn
            self._index_pending(self._conn)
            self.engine.notify_changed(self._conn)
            self._conn.execute("COMMIT")
        except UNAVAILABLE_ERRORS as e:
            self._rollback()
            raise StorageUnavailable(f"database write failed: {e}") from e
        except BaseException:
            self._rollback()
            raise

    def write_together(self, calls: Sequence[Callable[[], R]]) -> list[R]:
        """Run ``calls`` (each doing its writes in :meth:`_write`) in one transaction and
        one commit; their results in order.  If any call raises, even one that catches its
        own error, or the commit fails, the whole transaction is rolled back and this
        raises: the caller runs each alone then (pigeond/storage/write_queue.py)."""
        results: list[R] = []
        with self._write():
            together = self._together = _Together()
            try:
                results = [call() for call in calls]
            finally:
                self._together = None
            if together.spoiled:
                raise SharedWriteSpoiled("a call failed inside a shared write transaction")
        return results

    def _index_pending(self, conn: Connection) -> None:
        """Index, at the commit, the rows this transaction inserted, where the engine does
        not keep its search index itself (pigeond/storage/engines/sqlite.py)."""
        if not self._search_upkeep:
            self._search_upkeep = self.engine.has_search_upkeep(conn)
        if self._search_upkeep:
            self.engine.index_pending(conn)

    def _rollback(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except UNAVAILABLE_ERRORS:
            pass  # the connection is gone, and its transaction with it

    @staticmethod
    def _queued_for(conn: Connection, target: str, limit: int) -> int:
        """Queued messages for ``target``, counted no further than ``limit``: a walk of at
        most ``limit`` index entries, whatever the queue's length."""
        return int(
            conn.execute(QUEUED_FOR_TARGET_SQL, {"target": target, "limit": limit}).fetchone()[0]
        )

    def _next_sequence(self, conn: Connection, name: str) -> int:
        row = conn.execute(
            "UPDATE swarm_sequences SET value = value + 1 WHERE name = ? RETURNING value", (name,)
        ).fetchone()
        return int(row[0])

    def _sequence_value(self, conn: Connection, name: str) -> int:
        """The last number ``name`` gave out; with :meth:`_set_sequence`, inside one write
        transaction, a group of inserts numbers its rows with two statements, not one each.
        Read by an update that changes nothing: it locks the row until the commit, so on
        PostgreSQL another daemon's group waits for this one and then reads its last number
        (a plain read would give both groups the same numbers)."""
        return int(self._ask_sequence_value(conn, name).fetchone()[0])

    @staticmethod
    def _ask_sequence_value(conn: Connection, name: str) -> Cursor:
        """:meth:`_sequence_value`'s statement, its answer not read yet: on PostgreSQL it
        goes out with the next statement whose answer is read, one round trip for both."""
        return conn.execute(
            "UPDATE swarm_sequences SET value = value WHERE name = ? RETURNING value", (name,)
        )

    def _set_sequence(self, conn: Connection, name: str, value: int) -> None:
        conn.execute("UPDATE swarm_sequences SET value = ? WHERE name = ?", (value, name))

    def _get(self, conn: Connection, msg_id: str) -> StoredMessage | None:
        row = conn.execute(
            f"SELECT {COLUMNS} FROM swarm_messages WHERE msg_id = ?", (msg_id,)
        ).fetchone()
        return None if row is None else row_to_message(row)

    def _insert(
        self,
        conn: Connection,
        *,
        msg_id: str,
        from_session: str,
        to_session: str | None,
        channel: str | None,
        kind: str,
        priority: str,
        reply_to: str | None,
        payload: str,
        now_ms: int,
        expires_at: int | None,
        seq: int | None = None,
        from_name: str | None = None,
        to_name: str | None = None,
        channel_msg_id: str | None = None,
        thread_id: str | None = None,
        sender: SenderClaim = UNVERIFIED_SENDER,
        steer: bool = False,
    ) -> None:
        """Insert a queued message numbered ``seq`` (None: the accept sequence's next), in
        ``thread_id`` (None: the thread of the message it replies to, as pigeond's notices
        and reminders take it; none without one).  A sender whose proof is pending makes
        it due only once settled (``settle_by`` at the latest)."""
        if seq is None:
            seq = self._next_sequence(conn, "accept")
        due_at = now_ms if sender.settle_by is None else max(sender.settle_by, now_ms)
        conn.execute(
            "INSERT INTO swarm_messages (msg_id, from_session, to_session, channel, kind,"
            " priority, reply_to, payload, state, attempts, next_retry_at, created_at,"
            " updated_at, accept_seq, expires_at, from_name, to_name, channel_msg_id,"
            " thread_id, from_proof, from_proof_note, steer)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', 0, ?, ?, ?, ?, ?, ?, ?, ?,"
            " COALESCE(?, (SELECT r.thread_id FROM swarm_messages r WHERE r.msg_id = ?)), ?, ?,"
            " ?)",
            (msg_id, from_session, to_session, channel, kind, priority, reply_to, payload,
             due_at, now_ms, now_ms, seq, expires_at, from_name, to_name, channel_msg_id,
             thread_id, reply_to, sender.proof.value, sender.note, int(steer)),
        )  # fmt: skip

    def _queue_notice(
        self, conn: Connection, ended: StoredMessage, reason: str, now_ms: int, ttl_ms: int
    ) -> str | None:
        """Tell the sender that ``ended`` will not be delivered; returns the notice's target.

        Only a session can be told (the sender must look like one), and a notice
        is never sent about a notice.
        """
        if ended.kind == NOTICE_KIND or not SESSION_ID_RE.fullmatch(ended.from_session):
            return None
        target = ended.to_session or f"channel {ended.channel}"
        if ended.to_session is not None and ended.channel is not None:
            target = f"{ended.to_session} (a member of channel {ended.channel})"
        payload = (
            f"pigeond could not deliver your message {ended.msg_id} to {target}: {reason}"
            f" (attempts: {ended.attempts}, requeues: {ended.requeue_count})."
        )
        self._insert(
            conn, msg_id=make_msg_id(now_ms), from_session=NOTICE_SENDER,
            to_session=ended.from_session, channel=None, kind=NOTICE_KIND, priority="normal",
            reply_to=ended.msg_id, payload=payload, now_ms=now_ms, expires_at=now_ms + ttl_ms,
            sender=NOTICE_SENDER_CLAIM,
        )  # fmt: skip
        return ended.from_session
