"""The schema of turn costs: one row per turn a hand-off caused, and its msg_ids.

Kept apart so that moving the migration to its number is one line in
:data:`~pigeond.storage.migrations.MIGRATIONS` (PostgreSQL's baseline has the tables:
:mod:`pigeond.storage.postgres.schema`).  Released text is never changed: an old database
is upgraded exactly as it always was.

``swarm_turns`` holds what a turn used, read from the target's transcript once the turn
ended (pigeond/storage/costs.py): five token counts and the cost in US dollars (NULL:
unknown, a Claude Code turn).  ``(session, turn_key)`` is unique, ``turn_key`` being the
transcript's id of where the turn started, so a turn read again (a repeated look, a
restart) is never a second row.  ``swarm_turn_messages`` links a turn to the hand-offs it
consumed; ``msg_id`` is its key, so a hand-off is counted in at most one turn.  A thread's
sums join it with ``swarm_messages.thread_id``; a session's read ``swarm_turns`` alone.
"""

from __future__ import annotations

from typing import Final

V19_TURNS: Final = """
CREATE TABLE swarm_turns (
    turn_id            TEXT PRIMARY KEY,
    session            TEXT NOT NULL,
    turn_key           TEXT NOT NULL,
    recorded_at        INTEGER NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    reasoning_tokens   INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost               REAL,
    UNIQUE (session, turn_key)
) WITHOUT ROWID;
CREATE INDEX idx_swarm_turns_recorded ON swarm_turns (recorded_at);
CREATE TABLE swarm_turn_messages (
    msg_id  TEXT PRIMARY KEY,
    turn_id TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX idx_swarm_turn_messages_turn ON swarm_turn_messages (turn_id);
"""
