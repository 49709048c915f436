"""The schema of keeping a person in charge: threads, and brake holds.

Migrations 17 and 18, as SQL text that :mod:`pigeond.storage.migrations` numbers and
applies (PostgreSQL's baseline has them: :mod:`pigeond.storage.postgres.schema`).  Each is one
named constant, so that the order of migrations is one line to change.  Released text is
never changed: an old file is upgraded exactly as it always was.
"""

from __future__ import annotations

from typing import Final

# Threads (pigeond/storage/threads.py): every message accepted from now on names its thread
# (the send's ``thread``, else its ``reply_to``'s, else a new ``thr_…`` id); a channel
# message's member copies and pigeond's own notices carry the thread of the message they
# come from.  Messages stored before this version have none (NULL): a reply to one starts
# a new thread.  ``swarm_threads`` keeps one row per thread: ``hops`` (messages accepted
# for delivery in a row from agents since ``reset_at``: the hop brake's counter), ``turns``
# (hand-offs recorded, one per prompt per thread), ``messages`` (sends accepted, held or
# not), and the limits a person raised for this thread alone (NULL: the option's value).
# idx_swarm_thread finds a thread's messages in accept order; idx_swarm_threads_updated
# lists the threads newest first.
V17_THREADS: Final = """
ALTER TABLE swarm_messages ADD COLUMN thread_id TEXT;
CREATE INDEX idx_swarm_thread
    ON swarm_messages (thread_id, accept_seq)
    WHERE thread_id IS NOT NULL;
CREATE TABLE swarm_threads (
    thread_id    TEXT PRIMARY KEY,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    hops         INTEGER NOT NULL DEFAULT 0,
    turns        INTEGER NOT NULL DEFAULT 0,
    messages     INTEGER NOT NULL DEFAULT 0,
    reset_at     INTEGER NOT NULL,
    hop_limit    INTEGER,
    token_budget INTEGER,
    cost_budget  REAL
) WITHOUT ROWID;
CREATE INDEX idx_swarm_threads_updated ON swarm_threads (updated_at);
"""

# Brake holds (pigeond/storage/brake_holds.py), kept apart from consent holds: a held
# message is a queued row with no ``next_retry_at`` (never due, as migration 12 made
# consent holds), and ``hold_kind`` says whose hold it is: 'consent' (its target's policy:
# released by a policy change or ``pigeon policy release``) or 'brake' (a conversation
# brake: released or dropped by a person only).  NULL once it is not held.  A brake hold
# also keeps the brake's name and its reason (kept after release, as history), and its
# time to live: a brake-held message never expires (``expires_at`` NULL while held), and
# gets its whole ttl again from its release.  Messages held by consent before this version
# are marked so.  ``swarm_brake_resets`` keeps when a person last reset a brake's counter
# for a scope (``pair:<a>:<b>``, the two sessions in order; ``budget:<thread>``).
# idx_swarm_brake_held lists what waits for a person, per thread, without reading history;
# idx_swarm_brake_held_target counts it per target, which the queue cap leaves out.  Both
# hold only held rows: a few.
V18_BRAKES: Final = """
ALTER TABLE swarm_messages ADD COLUMN hold_kind TEXT
    CHECK (hold_kind IS NULL OR hold_kind IN ('consent', 'brake'));
ALTER TABLE swarm_messages ADD COLUMN hold_brake TEXT;
ALTER TABLE swarm_messages ADD COLUMN hold_reason TEXT;
ALTER TABLE swarm_messages ADD COLUMN hold_ttl_ms INTEGER;
UPDATE swarm_messages SET hold_kind = 'consent'
    WHERE state = 'queued' AND next_retry_at IS NULL AND to_session IS NOT NULL;
CREATE INDEX idx_swarm_brake_held
    ON swarm_messages (thread_id, accept_seq)
    WHERE hold_kind = 'brake';
CREATE INDEX idx_swarm_brake_held_target
    ON swarm_messages (to_session)
    WHERE hold_kind = 'brake';
CREATE TABLE swarm_brake_resets (
    scope    TEXT PRIMARY KEY,
    reset_at INTEGER NOT NULL
) WITHOUT ROWID;
"""
