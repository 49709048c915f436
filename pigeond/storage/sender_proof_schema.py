"""The schema of who really sent a message: migration 22 (PostgreSQL's baseline has it).

``from_proof`` is what pigeond could tell of the sender (:class:`pigeond.model.SenderProof`):
rows stored before this version were never looked at, so they stay ``unverified``.
``from_proof_note`` says why in a few words; ``from_proof_call`` names the tool call that
verified the message, so one call verifies one message (idx_swarm_proof_call: unique per
sender, a replay of the same content by another process finds the call used).
idx_swarm_proof_pending holds the messages still to settle (a few, for seconds): the
sender-proof job walks it, oldest first, and a restart finds them there again.
Released text is never changed.
"""

from __future__ import annotations

from typing import Final

V22_SENDER_PROOF: Final = """
ALTER TABLE swarm_messages ADD COLUMN from_proof TEXT NOT NULL DEFAULT 'unverified'
    CHECK (from_proof IN ('pending', 'verified', 'person', 'unverified'));
ALTER TABLE swarm_messages ADD COLUMN from_proof_note TEXT;
ALTER TABLE swarm_messages ADD COLUMN from_proof_call TEXT;
CREATE INDEX idx_swarm_proof_pending
    ON swarm_messages (created_at)
    WHERE from_proof = 'pending';
CREATE UNIQUE INDEX idx_swarm_proof_call
    ON swarm_messages (from_session, from_proof_call)
    WHERE from_proof_call IS NOT NULL;
"""
