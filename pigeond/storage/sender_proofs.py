"""Who really sent a message, as SQL: the messages whose sender is still being verified,
and how one settles (migration 22, storage/sender_proof_schema.py).

A message whose proof is ``pending`` is queued but not due: it was stored with
``next_retry_at`` at its deadline (the accept's ``settle_by``), and the arbiter's batch
stops at it whatever that says (storage/delivery.py ``ready_batch``).  Settling it (the
sender-proof job, pigeond/delivery/sender_proof.py) writes the proof on the message and
on a channel message's copies, which share it, and makes them due at once.  Settled
``unverified``, each target that set a policy judges it again: its allow-list no longer
admits it, so it is held (a ``refuse`` included: it was accepted with a 202, so it is held
out, not lost) with a reason naming the sender.  One tool call verifies one message: the
call is written on the message, and a second message claiming the same call is refused
(idx_swarm_proof_call, unique per sender).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pigeond.consent import Policy, held_reason
from pigeond.model import SenderProof, StoredMessage
from pigeond.storage.base import COLUMNS, Connection, RepositoryBase, reads, row_to_message

# The messages still to settle, oldest first: a walk of the small partial
# idx_swarm_proof_pending.  A channel's copies settle with their channel message.
_PENDING_SQL = (
    f"SELECT {COLUMNS} FROM swarm_messages WHERE from_proof = 'pending'"
    " AND channel_msg_id IS NULL ORDER BY created_at LIMIT ?"
)
# The proof on one message and its copies; due at once unless held (no next_retry_at).
_SETTLE_SQL = (
    "UPDATE swarm_messages SET from_proof = :proof, from_proof_note = :note,"
    " from_proof_call = CASE WHEN msg_id = :id THEN :call END, updated_at = :now,"
    " next_retry_at = CASE WHEN state = 'queued' AND next_retry_at > :now THEN :now"
    " ELSE next_retry_at END"
    " WHERE from_proof = 'pending' AND {where}"
)


@dataclass(frozen=True, slots=True)
class ProofSettled:
    """What settling one message did: the targets whose queue it may have made due (to
    kick), and whether the proof was written at all (False: already settled, gone, or
    the call already verified another message)."""

    written: bool
    due_targets: tuple[str, ...] = ()


NOT_WRITTEN = ProofSettled(False)


class SenderProofs(RepositoryBase):
    @reads
    def pending_proofs(self, limit: int) -> list[StoredMessage]:
        """At most ``limit`` messages whose sender is still being verified, oldest first."""
        rows = self._conn.execute(_PENDING_SQL, (limit,)).fetchall()
        return [row_to_message(r) for r in rows]

    def settle_proof(
        self,
        msg_id: str,
        proof: SenderProof,
        note: str,
        now_ms: int,
        call_id: str | None = None,
    ) -> ProofSettled:
        """Write ``proof`` (and why) on a pending message and its channel copies, in one
        transaction; ``call_id`` is the tool call that verified it, refused if it verified
        another message of the same sender already."""
        with self._write() as conn:
            message = self._get(conn, msg_id)
            if message is None or message.from_proof != SenderProof.PENDING:
                return NOT_WRITTEN
            if call_id is not None and self._call_used(conn, message.from_session, call_id):
                return NOT_WRITTEN
            values = {"proof": proof.value, "note": note, "id": msg_id, "call": call_id,
                      "now": now_ms}  # fmt: skip
            conn.execute(_SETTLE_SQL.format(where="msg_id = :id"), values)
            conn.execute(_SETTLE_SQL.format(where="channel_msg_id = :id"), values)
            rows = self._deliveries(conn, message)
            if proof is SenderProof.UNVERIFIED:
                self._consent_unverified(conn, rows, now_ms)
            due = tuple(dict.fromkeys(t for t, _ in rows))
            self.engine.notify_due(conn, due)  # wake the daemon whose opencode has each target
            return ProofSettled(True, due)

    @staticmethod
    def _call_used(conn: Connection, sender: str, call_id: str) -> bool:
        row = conn.execute(
            "SELECT 1 FROM swarm_messages WHERE from_session = ? AND from_proof_call = ?",
            (sender, call_id),
        ).fetchone()
        return row is not None

    @staticmethod
    def _deliveries(conn: Connection, message: StoredMessage) -> list[tuple[str, str]]:
        """(target, msg_id) of each queued delivery of ``message``: itself when direct,
        else its channel copies."""
        if message.to_session is not None:
            if message.state != "queued":
                return []
            return [(message.to_session, message.msg_id)]
        rows = conn.execute(
            "SELECT to_session, msg_id FROM swarm_messages"
            " WHERE channel_msg_id = ? AND state = 'queued'",
            (message.msg_id,),
        ).fetchall()
        return [(str(t), str(m)) for t, m in rows]

    @staticmethod
    def _consent_unverified(
        conn: Connection, deliveries: Sequence[tuple[str, str]], now_ms: int
    ) -> None:
        """Each delivery whose target set a policy that holds or refuses is held, as that
        policy's allow-list no longer admits an unverified sender.  A message in doubt
        (it may be in the transcript already) is never held, as storage/policies.py."""
        for target, msg_id in deliveries:
            row = conn.execute(
                "SELECT policy FROM swarm_policies WHERE session = ?", (target,)
            ).fetchone()
            if row is None or row[0] == Policy.ACCEPT:
                continue
            sender = conn.execute(
                "SELECT from_session FROM swarm_messages WHERE msg_id = ?", (msg_id,)
            ).fetchone()[0]
            conn.execute(
                "UPDATE swarm_messages SET next_retry_at = NULL, last_error = ?,"
                " hold_kind = 'consent', updated_at = ?"
                " WHERE msg_id = ? AND state = 'queued' AND next_retry_at IS NOT NULL"
                " AND handoff_intent_at IS NULL",
                (held_reason(target, Policy(row[0]), str(sender)), now_ms, msg_id),
            )
