"""The delivery state machine, as SQL.

    queued ──hand-off──▶ handed_off ──found in transcript──▶ (verified_at set)
      │  ▲                    │
      │  └──── not found after the grace period (≤ max requeues) ◀┘
      ├──▶ failed    (attempts used up, permanent error, or never found)
      ├──▶ expired   (its time to live ran out while queued)
      ├──▶ dropped   (pigeond's own notice or reminder that failed or expired in turn)
      └──▶ cancelled (by an operator; see storage/operator.py, which also requeues)

A message that ends failed or expired queues a ``delivery.failed`` notice to
its sender in the same transaction, so a crash cannot lose the notice.

Before its prompt goes to opencode a queued message gets ``handoff_intent_at``
(committed before the call, see storage/intents.py); the hand-off's outcome clears it.
A queued message that still has it after a crash is *in doubt*: it may be in its
target's transcript already.  It stays queued and is never expired while in doubt (it
may have arrived); the transcript ends the doubt (storage/intents.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pigeond.model import (
    NO_MODE,
    PIGEOND_KINDS,
    HandoffMode,
    SenderProof,
    State,
    StoredMessage,
)
from pigeond.storage.base import (
    COLUMNS,
    NO_LIMIT,
    Connection,
    RepositoryBase,
    reads,
    row_to_message,
)
from pigeond.storage.engines import indexed_by, json_texts, unlikely
from pigeond.storage.migrations import PRIORITY_RANK_SQL
from pigeond.storage.threads import count_turns
from pigeond.storage.write_marks import shares_commit

# Which of a batch's msg_ids (a JSON array) are still queued: a hand-off records only those.
_QUEUED_AMONG_SQL = json_texts("?").map(
    lambda ids: (
        "SELECT msg_id FROM swarm_messages"
        f" WHERE msg_id IN (SELECT value FROM {ids}) AND state = 'queued'"
    )
)

# unlikely(): with ANALYZE statistics and thousands of queued messages waiting out a
# backoff, SQLite would rather walk idx_swarm_target_head whole (3.6 ms a tick) to spare
# the DISTINCT its sort; due messages are few, so the range on idx_swarm_ready wins (20 us).
READY_TARGETS_SQL = unlikely("next_retry_at <= ?").map(
    lambda due: (
        "SELECT DISTINCT to_session FROM swarm_messages"
        f" WHERE state = 'queued' AND {due} AND to_session IS NOT NULL"
    )
)
# Queued messages past their expiry, not in doubt (it may have arrived: expired only once
# the transcript says it did not).
EXPIRED_SQL = indexed_by("swarm_messages", "idx_swarm_expiry").map(
    lambda table: (
        f"SELECT msg_id FROM {table} WHERE state = 'queued'"
        " AND to_session IS NOT NULL AND expires_at IS NOT NULL AND expires_at <= ?"
        " AND handoff_intent_at IS NULL"
    )
)
DEFAULT_NOTICE_TTL_MS = 24 * 3600 * 1000
# One prompt's hand-off: its msg_ids, when, verify by when, and the mode it named.
HandOffGroup = tuple[Sequence[str], int, int | None, HandoffMode]


class DeliveryTransitions(RepositoryBase):
    notice_ttl_ms = DEFAULT_NOTICE_TTL_MS

    # -- what is ready -------------------------------------------------------

    @reads
    def ready_targets(self, now_ms: int) -> list[str]:
        """Targets with at least one queued message due at ``now_ms``."""
        rows = self._conn.execute(self.engine.sql(READY_TARGETS_SQL), (now_ms,))
        return [r[0] for r in rows.fetchall()]

    @reads
    def explain_ready_targets(self, now_ms: int) -> list[str]:
        """SQLite's query plan of :meth:`ready_targets`, one detail string per step."""
        rows = self._conn.execute("EXPLAIN QUERY PLAN " + READY_TARGETS_SQL.sqlite, (now_ms,))
        return [str(r[3]) for r in rows.fetchall()]

    @reads
    def count_queued_for(self, target: str, at_most: int | None = None) -> int:
        """Queued messages for ``target``, counted up to ``at_most`` (None: all of them)."""
        limit = NO_LIMIT if at_most is None else max(at_most, 0)
        return self._queued_for(self._conn, target, limit)

    @reads
    def is_stored(self, msg_id: str) -> bool:
        """Whether a message with ``msg_id`` is stored, in any state (a retried send)."""
        row = self._conn.execute("SELECT 1 FROM swarm_messages WHERE msg_id = ?", (msg_id,))
        return row.fetchone() is not None

    def _queue_order(
        self, target: str, now_ms: int | None, limit: int, held: bool = True
    ) -> list[StoredMessage]:
        """Queued messages in hand-off order; expired ones left out when ``now_ms`` is given,
        held ones (no ``next_retry_at``: storage/policies.py) unless ``held``."""
        rows = self._conn.execute(
            f"SELECT {COLUMNS} FROM swarm_messages"
            " WHERE to_session = :target AND state = 'queued'"
            " AND (:held OR next_retry_at IS NOT NULL)"
            " AND (CAST(:now AS BIGINT) IS NULL OR expires_at IS NULL OR expires_at > :now"
            # a message in doubt is looked for in the transcript first, even past its expiry
            " OR handoff_intent_at IS NOT NULL)"
            f" ORDER BY {PRIORITY_RANK_SQL}, accept_seq LIMIT :limit",
            {"target": target, "now": now_ms, "limit": limit, "held": held},
        ).fetchall()
        return [row_to_message(r) for r in rows]

    @reads
    def queue_head(self, target: str, now_ms: int | None = None) -> StoredMessage | None:
        """The live queued message that goes to ``target`` next, due or not."""
        head = self._queue_order(target, now_ms, 1)
        return head[0] if head else None

    @reads
    def ready_batch(self, target: str, now_ms: int, limit: int) -> list[StoredMessage]:
        """The next messages for ``target`` in priority-then-FIFO order that are due now.

        The batch stops at the first message that is not due: a message waiting
        out its backoff holds the ones behind it, so order is kept.  Expired
        messages are skipped: they never block a queue; so are held ones (the target's
        policy holds them), so an allowed sender's message is not stuck behind them.  A
        message whose sender is still being verified is not due, whatever its
        ``next_retry_at`` says (a release, or a restart past its deadline, made it due).
        """
        batch = []
        for message in self._queue_order(target, now_ms, limit, held=False):
            if message.next_retry_at is None or message.next_retry_at > now_ms:
                break
            if message.from_proof == SenderProof.PENDING:
                break  # not due before its sender is settled (storage/sender_proofs.py)
            batch.append(message)
        return batch

    # -- hand-off and failures -------------------------------------------------

    def mark_handed_off(self, msg_id: str, now_ms: int, verify_by: int | None = None) -> bool:
        return bool(self.mark_handed_off_many([msg_id], now_ms, verify_by))

    def mark_handed_off_many(
        self,
        msg_ids: Sequence[str],
        now_ms: int,
        verify_by: int | None = None,
        mode: HandoffMode = NO_MODE,
    ) -> list[str]:
        """queued → handed_off, each taking the next hand-off number, in the order given;
        ``mode`` records the agent and model the prompt named (and a note when it fell back)."""
        with self._write() as conn:
            return self._hand_off(conn, msg_ids, now_ms, verify_by, mode)

    def mark_handed_off_groups(self, groups: Sequence[HandOffGroup]) -> list[list[str]]:
        """:meth:`mark_handed_off_many` for several prompts (of different targets) in one
        transaction: under load the arbiter records many targets' hand-offs with one
        commit, one fsync.  All or nothing, like one group."""
        with self._write() as conn:
            return [self._hand_off(conn, *group) for group in groups]

    def _hand_off(
        self,
        conn: Connection,
        msg_ids: Sequence[str],
        now_ms: int,
        verify_by: int | None,
        mode: HandoffMode,
    ) -> list[str]:
        # asked together, read together: on PostgreSQL one round trip for the batch
        states = conn.execute(self.engine.sql(_QUEUED_AMONG_SQL), (json.dumps(list(msg_ids)),))
        numbers = self._ask_sequence_value(conn, "handoff")
        queued = {str(row[0]) for row in states.fetchall()}
        seq = int(numbers.fetchone()[0])
        done: list[str] = []
        for msg_id in msg_ids:
            if msg_id not in queued or msg_id in done:
                continue
            seq += 1
            conn.execute(
                "UPDATE swarm_messages SET state = 'handed_off', handed_off_at = ?,"
                " updated_at = ?, next_retry_at = NULL, last_error = NULL,"
                " handoff_seq = ?, verified_at = NULL, verify_by = ?, handoff_agent = ?,"
                " handoff_provider = ?, handoff_model = ?, handoff_variant = ?,"
                " handoff_note = ?, handoff_intent_at = NULL WHERE msg_id = ?",
                (now_ms, now_ms, seq, verify_by, mode.agent, mode.provider, mode.model,
                 mode.variant, mode.note, msg_id),
            )  # fmt: skip
            done.append(msg_id)
        if done:
            self._set_sequence(conn, "handoff", seq)
        count_turns(conn, self.engine, done)  # one prompt: a turn for each of its threads
        return done

    def record_failed_attempt(
        self,
        msg_id: str,
        error: str,
        now_ms: int,
        retry_at_ms: int | None,
        *,
        may_have_arrived: bool = False,
    ) -> bool:
        """Count one failed attempt; retry at ``retry_at_ms``, or fail for good when None.
        The hand-off's intent is cleared, unless the prompt ``may_have_arrived`` (no answer
        within the deadline): the retry then looks for it in the transcript first."""
        with self._write() as conn:
            if not self._is_queued(msg_id):
                return False
            conn.execute(
                "UPDATE swarm_messages SET attempts = attempts + 1, last_error = ?,"
                " next_retry_at = ?, updated_at = ?,"
                " handoff_intent_at = CASE WHEN ? THEN handoff_intent_at END WHERE msg_id = ?",
                (error, retry_at_ms, now_ms, may_have_arrived, msg_id),
            )
            if retry_at_ms is None:
                self._end(msg_id, "failed", error, now_ms)
            return True

    def record_outage(
        self, msg_ids: Sequence[str], error: str, now_ms: int, retry_at_ms: int
    ) -> list[str]:
        """opencode is unreachable: retry later without spending an attempt (the prompt
        never reached it: the hand-off's intent is cleared)."""
        done = []
        with self._write() as conn:
            for msg_id in msg_ids:
                if self._is_queued(msg_id):
                    conn.execute(
                        "UPDATE swarm_messages SET last_error = ?, next_retry_at = ?,"
                        " updated_at = ?, handoff_intent_at = NULL WHERE msg_id = ?",
                        (error, retry_at_ms, now_ms, msg_id),
                    )
                    done.append(msg_id)
        return done

    def fail_now(self, msg_ids: Sequence[str], error: str, now_ms: int) -> list[str]:
        """A permanent error: failed at once, no retry."""
        done = []
        with self._write() as conn:
            for msg_id in msg_ids:
                if self._is_queued(msg_id):
                    conn.execute(
                        "UPDATE swarm_messages SET attempts = attempts + 1 WHERE msg_id = ?",
                        (msg_id,),
                    )
                    self._end(msg_id, "failed", error, now_ms)
                    done.append(msg_id)
        return done

    def expire_due(self, now_ms: int) -> list[str]:
        """Queued direct messages whose time to live ran out become expired.

        Runs every tick, so it only takes the write lock when something is due.
        """
        if not self._due_to_expire(now_ms):
            return []
        with self._write():
            due = self._expired_ids(now_ms)
            for msg_id in due:
                self._end(msg_id, "expired", "expired before it could be delivered", now_ms)
        return due

    @reads
    def _due_to_expire(self, now_ms: int) -> list[str]:
        """The look before the write lock is taken: a database that cannot be read (locked,
        PostgreSQL down) is StorageUnavailable, which the sweep logs once, not a crash."""
        return self._expired_ids(now_ms)

    def _expired_ids(self, now_ms: int) -> list[str]:
        """Queued messages past their expiry: a range on idx_swarm_expiry, named, since
        without statistics the planner prefers the equality on state of idx_swarm_ready
        and reads every queued row (0.8 ms a sweep with 5,000 stuck, against 5 us)."""
        rows = self._conn.execute(self.engine.sql(EXPIRED_SQL), (now_ms,))
        return [r[0] for r in rows.fetchall()]

    def _end(self, msg_id: str, state: str, reason: str, now_ms: int) -> None:
        """Inside a write: end the message and queue its sender's notice.  A message of
        pigeond's own (a notice, a reply reminder) that cannot be delivered ends
        ``dropped`` (and tells nobody)."""
        message = self._get(self._conn, msg_id)
        assert message is not None
        if message.kind in PIGEOND_KINDS:
            state = State.DROPPED.value
        self._conn.execute(
            "UPDATE swarm_messages SET state = ?, last_error = ?, next_retry_at = NULL,"
            " verify_by = NULL, updated_at = ?, handoff_intent_at = NULL, hold_kind = NULL"
            " WHERE msg_id = ?",
            (state, reason, now_ms, msg_id),
        )
        ended = self._get(self._conn, msg_id)
        assert ended is not None
        self._queue_notice(self._conn, ended, reason, now_ms, self.notice_ttl_ms)

    def _is_queued(self, msg_id: str) -> bool:
        row = self._conn.execute("SELECT state FROM swarm_messages WHERE msg_id = ?", (msg_id,))
        found = row.fetchone()
        return found is not None and found[0] == "queued"

    # -- verification ------------------------------------------------------------

    @reads
    def verification_targets(self) -> list[str]:
        """Targets with hand-offs not yet found in their transcript."""
        rows = self._conn.execute(
            "SELECT DISTINCT to_session FROM swarm_messages"
            " WHERE state = 'handed_off' AND verify_by IS NOT NULL"
        ).fetchall()
        return [r[0] for r in rows]

    @reads
    def awaiting_verification(self, target: str) -> list[StoredMessage]:
        rows = self._conn.execute(
            f"SELECT {COLUMNS} FROM swarm_messages"
            " WHERE to_session = ? AND state = 'handed_off' AND verify_by IS NOT NULL"
            " ORDER BY verify_by",
            (target,),
        ).fetchall()
        return [row_to_message(r) for r in rows]

    @shares_commit
    def mark_verified(self, msg_ids: Sequence[str], now_ms: int) -> list[str]:
        with self._write() as conn:
            return self._verify(conn, msg_ids, now_ms)

    @staticmethod
    def _verify(conn: Connection, msg_ids: Sequence[str], now_ms: int) -> list[str]:
        """Handed off → seen, for those still awaiting it; the msg_ids changed."""
        done = []
        for msg_id in msg_ids:
            cursor = conn.execute(
                "UPDATE swarm_messages SET verified_at = ?, verify_by = NULL, updated_at = ?"
                " WHERE msg_id = ? AND state = 'handed_off' AND verify_by IS NOT NULL",
                (now_ms, now_ms, msg_id),
            )
            if cursor.rowcount:
                done.append(msg_id)
        return done

    def requeue_unverified(
        self, msg_id: str, reason: str, now_ms: int, max_requeues: int
    ) -> str | None:
        """A hand-off never seen in the transcript goes back to the queue, or fails.

        Returns the new state, or None when the message changed meanwhile.
        """
        with self._write() as conn:
            message = self._get(conn, msg_id)
            if message is None or message.state != "handed_off" or message.verify_by is None:
                return None
            if message.requeue_count >= max_requeues:
                self._end(msg_id, "failed", reason, now_ms)
                return "failed"
            conn.execute(
                "UPDATE swarm_messages SET state = 'queued', requeue_count = requeue_count + 1,"
                " next_retry_at = ?, verify_by = NULL, last_error = ?, updated_at = ?"
                " WHERE msg_id = ?",
                (now_ms, reason, now_ms, msg_id),
            )
            return "queued"
