"""What an operator (the ``pigeon`` CLI and the ``pigeon-tui``) reads and changes.

Opening is strict: an operator tool never creates or migrates a database, a SQLite
file or a PostgreSQL one (``--db postgresql://…``), and names a URL only without its
password (:func:`pigeond.db_url.redacted`, :func:`pigeond.db_url.without_password`).
Every state change is conditional on the row's state and, for one message,
on the ``updated_at`` the operator saw, inside one ``BEGIN IMMEDIATE``
transaction: a row the daemon changed meanwhile is left alone and reported.
Times come in as unix milliseconds; nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pigeond.model import State, StoredMessage
from pigeond.storage.base import COLUMNS, Connection, RepositoryBase, reads, row_to_message
from pigeond.storage.engines import engine_for
from pigeond.storage.engines.base import EngineSql
from pigeond.storage.migrations import PRIORITY_RANK_SQL

# Which states each action starts from.
REQUEUE_FROM = (State.FAILED.value, State.EXPIRED.value)
RETRY_NOW_FROM = (State.QUEUED.value,)
CANCEL_FROM = (State.QUEUED.value,)

# Requeued messages are due now, start their attempts afresh, and get a fresh
# time to live as long as their original one (else the sweeper would expire an
# expired message again at once).
_REQUEUE_SET = (
    "state = 'queued', attempts = 0, next_retry_at = :now, last_error = NULL,"
    " verify_by = NULL, updated_at = :now, handoff_intent_at = NULL,"
    " expires_at = CASE WHEN expires_at IS NULL THEN NULL"
    " WHEN expires_at > created_at THEN :now + (expires_at - created_at) ELSE :now END"
)
# Failed direct messages per target, the latest one's last_error with them (see
# failed_per_target): SQLite takes a bare column from the row of MAX(), and is told that
# failed rows are few (unlikely(), a planner hint); PostgreSQL says which row it means.
FAILED_PER_TARGET_SQL = EngineSql(
    sqlite=(
        "SELECT to_session, COUNT(*), MAX(updated_at), last_error FROM swarm_messages"
        " WHERE unlikely(state = 'failed') AND to_session IS NOT NULL"
        " GROUP BY to_session ORDER BY MAX(updated_at) DESC, to_session"
    ),
    postgres=(
        "SELECT to_session, n, updated_at, last_error FROM ("
        " SELECT DISTINCT ON (to_session) to_session, updated_at, last_error,"
        " COUNT(*) OVER (PARTITION BY to_session) AS n FROM swarm_messages"
        " WHERE state = 'failed' AND to_session IS NOT NULL"
        " ORDER BY to_session, updated_at DESC) AS latest"
        " ORDER BY updated_at DESC, to_session"
    ),
)
# A message in doubt (storage/intents.py) made due now is looked for in the transcript
# now; cancelled, it is never sent again and keeps its handoff_intent_at, which says that
# it may have reached the transcript before the cancel.
# Either ends a hold (a consent's or a brake's): the operator decided.
_RETRY_NOW_SET = "next_retry_at = :now, updated_at = :now, hold_kind = NULL"
_CANCEL_SET = (
    "state = 'cancelled', next_retry_at = NULL, verify_by = NULL, updated_at = :now,"
    " hold_kind = NULL"
)


class ActionOutcome(Enum):
    CHANGED = "changed"
    UNKNOWN = "unknown message"
    WRONG_STATE = "wrong state"
    STALE = "changed meanwhile"


@dataclass(frozen=True, slots=True)
class TargetQueue:
    """One target's queued direct messages."""

    target: str
    queued: int
    oldest_created_at: int
    next_retry_at: int | None


@dataclass(frozen=True, slots=True)
class FailedTarget:
    """One target's failed direct messages and the most recent error."""

    target: str
    failed: int
    latest_at: int
    latest_error: str | None


def open_existing(db: Path | str) -> Connection:
    """Open an existing pigeond database of the current schema: a SQLite file (WAL, busy
    timeout) or, for a ``postgresql://`` URL, a PostgreSQL database
    (pigeond/storage/existing.py).

    Raises SchemaError (one line) when it is missing, unreadable, not a pigeond database,
    or of another schema version; never creates or migrates.  PostgreSQL out of reach
    (refused, wrong password) is StorageUnavailable; its URL is only ever shown without
    the password.
    """
    return engine_for(db).open_existing(db)


class OperatorActions(RepositoryBase):
    # -- reading -------------------------------------------------------------

    @reads
    def list_messages(
        self,
        *,
        state: str | None = None,
        target: str | None = None,
        sender: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[StoredMessage]:
        """Messages newest first (by accept order), optionally filtered.

        ``target`` matches a direct target or a channel name.
        """
        rows = self._conn.execute(
            f"SELECT {COLUMNS} FROM swarm_messages"
            " WHERE (CAST(:state AS TEXT) IS NULL OR state = :state)"
            " AND (CAST(:target AS TEXT) IS NULL OR to_session = :target OR channel = :target)"
            " AND (CAST(:sender AS TEXT) IS NULL OR from_session = :sender)"
            " ORDER BY accept_seq DESC LIMIT :limit OFFSET :offset",
            {
                "state": state,
                "target": target,
                "sender": sender,
                "limit": limit,
                "offset": offset,
            },
        ).fetchall()
        return [row_to_message(r) for r in rows]

    @reads
    def search_messages(
        self, state: str | None, text: str, limit: int, offset: int = 0
    ) -> list[StoredMessage]:
        """Newest first, whose target, channel, sender, kind or payload contains ``text``."""
        pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self._conn.execute(
            f"SELECT {COLUMNS} FROM swarm_messages"
            " WHERE (CAST(:state AS TEXT) IS NULL OR state = :state) AND ("
            " to_session LIKE :p ESCAPE '\\' OR channel LIKE :p ESCAPE '\\'"
            " OR from_session LIKE :p ESCAPE '\\' OR kind LIKE :p ESCAPE '\\'"
            " OR payload LIKE :p ESCAPE '\\')"
            " ORDER BY accept_seq DESC LIMIT :limit OFFSET :offset",
            {"state": state, "p": pattern, "limit": limit, "offset": offset},
        ).fetchall()
        return [row_to_message(r) for r in rows]

    @reads
    def failed_per_target(self) -> list[FailedTarget]:
        """Failed direct messages per target, with the last_error of the latest one.

        SQLite takes the bare ``last_error`` from the row holding ``MAX(updated_at)``.

        Failed rows are found by their state (idx_swarm_direct_state), not by reading every
        direct message: ``unlikely()`` tells the planner that failed rows are few (retention
        prunes them; delivered history is the bulk), which ANALYZE statistics cannot say,
        since they average the rows per state (with them, the plan walked every direct
        message: 0.2 s with a million delivered, against 5 ms).
        """
        rows = self._conn.execute(self.engine.sql(FAILED_PER_TARGET_SQL)).fetchall()
        return [FailedTarget(str(t), int(n), int(at), err) for t, n, at, err in rows]

    @reads
    def count_channel_by_state(self) -> dict[str, int]:
        """Counts of channel messages by state."""
        rows = self._conn.execute(
            "SELECT state, COUNT(*) FROM swarm_messages WHERE channel IS NOT NULL GROUP BY state"
        ).fetchall()
        return {str(state): int(n) for state, n in rows}

    @reads
    def queued_per_target(self, now_ms: int) -> list[TargetQueue]:
        """Queued direct messages per target, the target with the oldest first, in one query.

        ``next_retry_at`` is when the target is really tried next: that of the head of its
        queue (priority, then accept order; expired messages skipped; None when only those
        are left).  Not the earliest of all its messages: the arbiter hands off in queue
        order, so a head held by an outage or a backoff holds the messages behind it, even
        those sent later and due at once.  The head is found on idx_swarm_target_head.
        """
        rows = self._conn.execute(
            "SELECT q.to_session, COUNT(*), MIN(q.created_at),"
            # the inner table unaliased, so the ORDER BY says the index's expression as is
            " (SELECT next_retry_at FROM swarm_messages"
            "   WHERE to_session = q.to_session AND state = 'queued'"
            "   AND (expires_at IS NULL OR expires_at > :now)"
            f"  ORDER BY {PRIORITY_RANK_SQL}, accept_seq LIMIT 1)"
            " FROM swarm_messages q WHERE q.state = 'queued' AND q.to_session IS NOT NULL"
            " GROUP BY q.to_session ORDER BY MIN(q.created_at), q.to_session",
            {"now": now_ms},
        ).fetchall()
        return [TargetQueue(str(t), int(n), int(oldest), nxt) for t, n, oldest, nxt in rows]

    # -- changing, one message ----------------------------------------------

    def requeue(
        self, msg_id: str, now_ms: int, expected_updated_at: int | None = None
    ) -> ActionOutcome:
        """failed or expired → queued, due now, attempts 0 (requeue_count kept)."""
        return self._change_one(msg_id, REQUEUE_FROM, _REQUEUE_SET, now_ms, expected_updated_at)

    def retry_now(
        self, msg_id: str, now_ms: int, expected_updated_at: int | None = None
    ) -> ActionOutcome:
        """A queued message becomes due at ``now_ms``."""
        return self._change_one(msg_id, RETRY_NOW_FROM, _RETRY_NOW_SET, now_ms, expected_updated_at)

    def cancel(
        self, msg_id: str, now_ms: int, expected_updated_at: int | None = None
    ) -> ActionOutcome:
        """queued → cancelled: terminal, never delivered, no notice."""
        return self._change_one(msg_id, CANCEL_FROM, _CANCEL_SET, now_ms, expected_updated_at)

    # -- changing, every matching message of one target ------------------------

    def requeue_target(self, target: str, now_ms: int) -> list[str]:
        """Every failed or expired message to ``target`` → queued; returns their ids."""
        return self._change_target(target, REQUEUE_FROM, _REQUEUE_SET, now_ms)

    def retry_now_target(self, target: str, now_ms: int) -> list[str]:
        """Every queued message to ``target`` becomes due now; returns their ids."""
        return self._change_target(target, RETRY_NOW_FROM, _RETRY_NOW_SET, now_ms)

    def cancel_target(self, target: str, now_ms: int) -> list[str]:
        """Every queued message to ``target`` → cancelled; returns their ids."""
        return self._change_target(target, CANCEL_FROM, _CANCEL_SET, now_ms)

    # -- the shared conditional writes ----------------------------------------

    def _change_one(
        self,
        msg_id: str,
        from_states: tuple[str, ...],
        set_sql: str,
        now_ms: int,
        expected_updated_at: int | None,
    ) -> ActionOutcome:
        states = ", ".join(f"'{s}'" for s in from_states)
        with self._write() as conn:
            current = self._get(conn, msg_id)
            if current is None:
                return ActionOutcome.UNKNOWN
            if expected_updated_at is not None and current.updated_at != expected_updated_at:
                return ActionOutcome.STALE
            if current.state not in from_states:
                return ActionOutcome.WRONG_STATE
            cursor = conn.execute(
                f"UPDATE swarm_messages SET {set_sql}"
                f" WHERE msg_id = :msg_id AND state IN ({states})"
                " AND updated_at = :seen",
                {"now": now_ms, "msg_id": msg_id, "seen": current.updated_at},
            )
            return ActionOutcome.CHANGED if cursor.rowcount == 1 else ActionOutcome.STALE

    def _change_target(
        self, target: str, from_states: tuple[str, ...], set_sql: str, now_ms: int
    ) -> list[str]:
        states = ", ".join(f"'{s}'" for s in from_states)
        with self._write() as conn:
            rows = conn.execute(
                f"UPDATE swarm_messages SET {set_sql}"
                f" WHERE to_session = :target AND state IN ({states}) RETURNING msg_id",
                {"now": now_ms, "target": target},
            ).fetchall()
        return sorted(str(r[0]) for r in rows)
