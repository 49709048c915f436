"""Migrations 17 (threads) and 18 (brake holds) in PostgreSQL's dialect: the same tables,
columns and indexes as :mod:`pigeond.storage.thread_schema` makes on SQLite (read its
comments for why), with unix-millisecond times as ``BIGINT``."""

from __future__ import annotations

from typing import Final

PG_V17_THREADS: Final = """
ALTER TABLE swarm_messages ADD COLUMN thread_id TEXT;
CREATE INDEX idx_swarm_thread ON swarm_messages (thread_id, accept_seq)
    WHERE thread_id IS NOT NULL;
CREATE TABLE swarm_threads (
    thread_id    TEXT PRIMARY KEY,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    hops         INTEGER NOT NULL DEFAULT 0,
    turns        INTEGER NOT NULL DEFAULT 0,
    messages     INTEGER NOT NULL DEFAULT 0,
    reset_at     BIGINT NOT NULL,
    hop_limit    INTEGER,
    token_budget BIGINT,
    cost_budget  DOUBLE PRECISION
);
CREATE INDEX idx_swarm_threads_updated ON swarm_threads (updated_at);
"""

PG_V18_BRAKES: Final = """
ALTER TABLE swarm_messages ADD COLUMN hold_kind TEXT
    CHECK (hold_kind IS NULL OR hold_kind IN ('consent', 'brake'));
ALTER TABLE swarm_messages ADD COLUMN hold_brake TEXT;
ALTER TABLE swarm_messages ADD COLUMN hold_reason TEXT;
ALTER TABLE swarm_messages ADD COLUMN hold_ttl_ms BIGINT;
UPDATE swarm_messages SET hold_kind = 'consent'
    WHERE state = 'queued' AND next_retry_at IS NULL AND to_session IS NOT NULL;
CREATE INDEX idx_swarm_brake_held ON swarm_messages (thread_id, accept_seq)
    WHERE hold_kind = 'brake';
CREATE INDEX idx_swarm_brake_held_target ON swarm_messages (to_session)
    WHERE hold_kind = 'brake';
CREATE TABLE swarm_brake_resets (
    scope    TEXT PRIMARY KEY,
    reset_at BIGINT NOT NULL
);
"""
