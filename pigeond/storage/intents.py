"""The intent to hand off: what makes a hand-off happen once across a crash.

A crash (``kill -9``, power loss) between opencode's 2xx to ``prompt_async`` and the
commit of the hand-off left the message queued, and the restart prompted it again: the
same message twice in the target's transcript, another LLM turn.  So before the call
the batch's messages get ``handoff_intent_at``, committed (:meth:`mark_handoff_intents`);
every outcome of the call clears it (storage/delivery.py).  A queued message that still
has it is *in doubt*: the arbiter looks for it in the target's transcript before it
sends anything to that target (pigeond/delivery/recovery.py), and
:meth:`settle_intents` records what the transcript said.

The intent is a column, not a state: to every reader (``pigeon``, the TUI, ``/health``,
``pigeon-send --wait``, the operator's cancel and retry-now) the message is still queued,
which is what it is until its outcome is known; the delivery state machine, its partial
indexes and the pruning rule stay as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from pigeond.storage.base import RepositoryBase
from pigeond.storage.engines import EngineSql

# What a hand-off found in the transcript after a crash records as its note.
FOUND_AFTER_RESTART_NOTE = (
    "found in the transcript after a hand-off whose outcome was not recorded (pigeond"
    " stopped during the call, or opencode did not answer in time); not sent again"
)
# Marking the intent claims the row.  On PostgreSQL, where several daemons share the
# queue, a row another session has locked (its write under way) is skipped, not waited
# for (FOR UPDATE SKIP LOCKED): it stays queued for a later drain.  The per-target
# advisory lock (pigeond/storage/postgres/locks.py) already keeps other daemons' drains
# away; this keeps an operator's write or a sweep from stalling the hand-off.
CLAIM_SQL = EngineSql(
    sqlite=(
        "UPDATE swarm_messages SET handoff_intent_at = ?, updated_at = ?"
        " WHERE msg_id = ? AND state = 'queued'"
    ),
    postgres=(
        "UPDATE swarm_messages SET handoff_intent_at = ?, updated_at = ?"
        " WHERE msg_id = (SELECT msg_id FROM swarm_messages WHERE msg_id = ?"
        " AND state = 'queued' FOR UPDATE SKIP LOCKED)"
    ),
)
# One prompt's intent: its msg_ids, and when.
IntentGroup = tuple[Sequence[str], int]


class HandOffIntents(RepositoryBase):
    def mark_handoff_intents(self, groups: Sequence[IntentGroup]) -> list[list[str]]:
        """Before a prompt goes to opencode: each group's still-queued messages get
        ``handoff_intent_at``, committed before the call (one transaction, one fsync, for
        every target's prompt under load).  Returns each group's ids that got it: a message
        cancelled meanwhile is not sent."""
        marked: list[list[str]] = []
        claim = self.engine.sql(CLAIM_SQL)
        with self._write() as conn:
            for group, now_ms in groups:
                marked.append([])
                for msg_id in group:
                    cursor = conn.execute(claim, (now_ms, now_ms, msg_id))
                    if cursor.rowcount:
                        marked[-1].append(msg_id)
        return marked

    def settle_intents(
        self,
        found: Sequence[str],
        missing: Sequence[str],
        now_ms: int,
        *,
        missing_until: int | None = None,
        reason: str | None = None,
    ) -> list[str]:
        """End the doubt of messages in doubt (queued with an intent), in one transaction.

        ``found`` were seen in the target's transcript: handed off (as of their intent)
        and verified, without a new prompt.  ``missing`` were not: with ``missing_until``
        None their intent is cleared and they are due now (sent as any queued message);
        else they stay in doubt, held until then with ``reason`` (opencode could not be
        asked, or it is too soon to tell), no attempt spent.  Returns the found ones
        recorded."""
        done = []
        with self._write() as conn:
            for msg_id in found:
                row = conn.execute(
                    "SELECT handoff_intent_at FROM swarm_messages WHERE msg_id = ?"
                    " AND state = 'queued' AND handoff_intent_at IS NOT NULL",
                    (msg_id,),
                ).fetchone()
                if row is None:
                    continue
                seq = self._next_sequence(conn, "handoff")
                conn.execute(
                    "UPDATE swarm_messages SET state = 'handed_off', handed_off_at = ?,"
                    " updated_at = ?, next_retry_at = NULL, last_error = NULL, handoff_seq = ?,"
                    " verified_at = ?, verify_by = NULL, handoff_agent = NULL,"
                    " handoff_provider = NULL, handoff_model = NULL, handoff_variant = NULL,"
                    " handoff_note = ?, handoff_intent_at = NULL WHERE msg_id = ?",
                    (row[0], now_ms, seq, now_ms, FOUND_AFTER_RESTART_NOTE, msg_id),
                )  # fmt: skip
                done.append(msg_id)
            for msg_id in missing:
                conn.execute(
                    "UPDATE swarm_messages SET next_retry_at = ?, last_error = ?, updated_at = ?,"
                    " handoff_intent_at = CASE WHEN ? THEN handoff_intent_at END"
                    " WHERE msg_id = ? AND state = 'queued' AND handoff_intent_at IS NOT NULL",
                    (now_ms if missing_until is None else missing_until, reason, now_ms,
                     missing_until is not None, msg_id),
                )  # fmt: skip
        return done
