"""The columns of ``swarm_messages`` as every query reads a message: in the order
:class:`pigeond.model.StoredMessage` takes them (``StoredMessage(*row)``), but for
``steer``, last, which it takes by name (a keyword-only field: storage/base.py)."""

from __future__ import annotations

COLUMNS = (
    "msg_id, from_session, to_session, channel, kind, priority, reply_to, payload, state,"
    " attempts, next_retry_at, created_at, updated_at, handed_off_at, last_error,"
    " accept_seq, handoff_seq, verified_at, verify_by, requeue_count, expires_at,"
    " handoff_agent, handoff_provider, handoff_model, handoff_variant, handoff_note,"
    " handoff_intent_at, answered_at, answer_message_id, from_name, to_name, channel_msg_id,"
    " thread_id, hold_kind, hold_brake, hold_reason, hold_ttl_ms,"
    " from_proof, from_proof_note, from_proof_call, steer"
)
