"""The numbered schema migrations, and the SQL expressions they and the queries share.

Each entry of :data:`MIGRATIONS` moves a database one version forward (see
:func:`pigeond.storage.schema.migrate`, which applies them).  A migration is never
changed once released: an old file must be upgraded exactly as it always was.  The
expressions below are the text partial indexes were built on, which the queries must
say word for word (SQLite uses a partial index only then).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from pigeond.storage.addressing_schema import (
    CLEAR_PENDING_SQL,
    INDEX_PENDING_SQL,
    PRUNABLE_SQL,
    V11_NAMES,
    V12_POLICIES,
    V13_SEARCH,
    V14_CHANNELS,
)
from pigeond.storage.costs_schema import V19_TURNS
from pigeond.storage.queue_bytes_schema import V24_QUEUE_BYTES_SQLITE
from pigeond.storage.sender_proof_schema import V22_SENDER_PROOF
from pigeond.storage.steer_schema import V23_STEER
from pigeond.storage.thread_schema import V17_THREADS, V18_BRAKES

# The priority order, as one SQL expression: the ready-head index is built on
# it and the head query orders by it, so the two must be the same text.
PRIORITY_RANK_SQL = "(CASE priority WHEN 'urgent' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END)"

# The expression migration 6 rebuilt the prunable index with, kept as it was (the pruner's
# expression today is addressing_schema.PRUNABLE_SQL, since channel messages fan out).
_PRUNABLE_SQL_V6 = (
    "(channel IS NOT NULL OR state IN ('failed', 'expired', 'cancelled', 'dropped')"
    " OR (state = 'handed_off' AND verified_at IS NOT NULL))"
)
# The expression migration 5 created the index with, kept as it was: a migration
# must do on an old file exactly what it always did.
_PRUNABLE_SQL_V5 = (
    "(channel IS NOT NULL OR state IN ('failed', 'expired', 'cancelled')"
    " OR (state = 'handed_off' AND verified_at IS NOT NULL))"
)
_V1_SEED = """
CREATE TABLE IF NOT EXISTS swarm_messages (
    msg_id        TEXT PRIMARY KEY,
    from_session  TEXT NOT NULL,
    to_session    TEXT,
    channel       TEXT,
    kind          TEXT NOT NULL,
    priority      TEXT NOT NULL DEFAULT 'normal',
    reply_to      TEXT,
    payload       TEXT NOT NULL,
    state         TEXT NOT NULL DEFAULT 'queued',
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_retry_at INTEGER,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    handed_off_at INTEGER
);
CREATE INDEX IF NOT EXISTS idx_swarm_target_state
    ON swarm_messages (to_session, state, next_retry_at, created_at);
CREATE INDEX IF NOT EXISTS idx_swarm_inbox
    ON swarm_messages (to_session, state, msg_id);
CREATE INDEX IF NOT EXISTS idx_swarm_channel
    ON swarm_messages (channel, state, created_at);
"""

_V2_SEQUENCES = f"""
ALTER TABLE swarm_messages ADD COLUMN last_error TEXT;
ALTER TABLE swarm_messages ADD COLUMN accept_seq INTEGER;
ALTER TABLE swarm_messages ADD COLUMN handoff_seq INTEGER;

CREATE TABLE swarm_sequences (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);

-- Rows written by the seed daemon get sequence numbers in the order they
-- were accepted and handed off.
UPDATE swarm_messages SET accept_seq = ordered.n
FROM (SELECT msg_id, ROW_NUMBER() OVER (ORDER BY created_at, rowid) AS n
      FROM swarm_messages) AS ordered
WHERE ordered.msg_id = swarm_messages.msg_id;

UPDATE swarm_messages SET handoff_seq = ordered.n
FROM (SELECT msg_id, ROW_NUMBER() OVER (ORDER BY handed_off_at, accept_seq) AS n
      FROM swarm_messages WHERE state = 'handed_off') AS ordered
WHERE ordered.msg_id = swarm_messages.msg_id;

INSERT INTO swarm_sequences (name, value)
    SELECT 'accept', COALESCE(MAX(accept_seq), 0) FROM swarm_messages;
INSERT INTO swarm_sequences (name, value)
    SELECT 'handoff', COALESCE(MAX(handoff_seq), 0) FROM swarm_messages;

-- Which targets have a due message: covers the arbiter's per-tick query and
-- holds queued rows only, so delivered history does not make it slower.
CREATE INDEX idx_swarm_ready
    ON swarm_messages (state, next_retry_at, to_session)
    WHERE state = 'queued';
-- The head of one target's queue: priority, then accept order.
CREATE INDEX idx_swarm_target_head
    ON swarm_messages (to_session, {PRIORITY_RANK_SQL}, accept_seq)
    WHERE state = 'queued';
-- The inbox: a target's hand-offs in hand-off order.
CREATE INDEX idx_swarm_handoff
    ON swarm_messages (to_session, handoff_seq)
    WHERE handoff_seq IS NOT NULL;
CREATE UNIQUE INDEX idx_swarm_accept_seq ON swarm_messages (accept_seq);
"""

_V3_DELIVERY = """
ALTER TABLE swarm_messages ADD COLUMN verified_at INTEGER;
ALTER TABLE swarm_messages ADD COLUMN verify_by INTEGER;
ALTER TABLE swarm_messages ADD COLUMN requeue_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE swarm_messages ADD COLUMN expires_at INTEGER;

-- Queued direct messages by expiry time, for the sweeper.
CREATE INDEX idx_swarm_expiry
    ON swarm_messages (expires_at)
    WHERE state = 'queued' AND to_session IS NOT NULL AND expires_at IS NOT NULL;
-- Hand-offs still waiting to be found in their target's transcript.
CREATE INDEX idx_swarm_unverified
    ON swarm_messages (to_session, verify_by)
    WHERE state = 'handed_off' AND verify_by IS NOT NULL;
"""

# Which agent and model each hand-off named (the target's own, never a default
# that switches its mode), and why, when pigeond had to name less than that.
_V4_HANDOFF_MODE = """
ALTER TABLE swarm_messages ADD COLUMN handoff_agent TEXT;
ALTER TABLE swarm_messages ADD COLUMN handoff_provider TEXT;
ALTER TABLE swarm_messages ADD COLUMN handoff_model TEXT;
ALTER TABLE swarm_messages ADD COLUMN handoff_variant TEXT;
ALTER TABLE swarm_messages ADD COLUMN handoff_note TEXT;
"""

# Done rows by age, for the pruner: partial, so queued and unverified rows (the
# ones the arbiter keeps changing) never touch it, and finding the oldest done
# rows costs the same whatever the size of the live queue.
_V5_RETENTION = f"""
CREATE INDEX idx_swarm_prunable
    ON swarm_messages (updated_at)
    WHERE {_PRUNABLE_SQL_V5};
"""

# A delivery.failed notice nobody could take (its addressee is no live session, as
# with `pigeon-send --from ses_me`) is 'dropped', not 'failed': operators have
# nothing to fix and the failed count stays the count of real failures.  Notices
# that ended before this migration are moved over; the prunable index learns the
# new state.
_V6_DROPPED = f"""
UPDATE swarm_messages SET state = 'dropped'
    WHERE kind = 'delivery.failed' AND state IN ('failed', 'expired');
DROP INDEX idx_swarm_prunable;
CREATE INDEX idx_swarm_prunable
    ON swarm_messages (updated_at)
    WHERE {_PRUNABLE_SQL_V6};
"""

# Direct messages by state, for the operator's reads (``pigeon``, ``pigeon-tui``, /health).
# Counting by state walks it in state order, where it sorted every direct message into a
# temporary b-tree (with a million delivered rows: 0.1 s instead of 0.4-0.7 s), and the
# failed messages per target are a SEARCH on state, not a walk of every direct message
# (2 ms instead of 0.12 s); the TUI's snapshot read went from 0.6 s to 0.13 s
# (bench/history_table.py, tests/test_history_plans.py).  Partial, so channel messages
# never enter it; an accept adds one small entry, a state change moves it.
_V7_DIRECT_STATE = """
CREATE INDEX idx_swarm_direct_state
    ON swarm_messages (state)
    WHERE to_session IS NOT NULL;
"""

# When a hand-off's prompt was about to go to opencode, written and committed before the
# call and cleared with its outcome: a queued row that still has it after a crash may
# already be in its target's transcript, so it is looked for there before it is sent
# again (pigeond/delivery/recovery.py).  A column, not a state: to every reader the row
# is still queued, which is what it is until its outcome is known.
_V8_HANDOFF_INTENT = """
ALTER TABLE swarm_messages ADD COLUMN handoff_intent_at INTEGER;
"""

# The end of the receipt chain: when the turn that consumed a message ended with the
# target's assistant's reply, and opencode's id of that reply (pigeond/delivery/answers.py).
# Seen messages not answered yet, by when they were seen: the verifier looks for answers
# only within a bounded time after that, so it reads a range at the recent end; partial,
# so queued rows never touch it, and an answer takes its row out.
_V9_ANSWERED = """
ALTER TABLE swarm_messages ADD COLUMN answered_at INTEGER;
ALTER TABLE swarm_messages ADD COLUMN answer_message_id TEXT;
CREATE INDEX idx_swarm_unanswered
    ON swarm_messages (verified_at, to_session)
    WHERE state = 'handed_off' AND verified_at IS NOT NULL AND answered_at IS NULL;
"""

# Owed replies: a send that expects a reply makes its target the debtor and its sender
# the creditor of one row here, in the send's own transaction; a message from the debtor
# with reply_to = msg_id meets it.  Unmet within within_ms of the hand-off, the debtor is
# reminded once; unmet within_ms after that, the creditor is told (pigeond/delivery/
# reminders.py); pruning a message (or deleting it by hand) removes its obligation, and
# requeueing a failed or expired one (pigeon requeue, or by hand) opens it again.
# A row per obligation, not columns of the message: only sends that
# expect a reply have one, and "who owes whom" reads only these few rows.  The partial
# index holds the outstanding ones the sweep walks.
_V10_OBLIGATIONS = """
CREATE TABLE swarm_obligations (
    msg_id      TEXT PRIMARY KEY,
    debtor      TEXT NOT NULL,
    creditor    TEXT NOT NULL,
    within_ms   INTEGER NOT NULL CHECK (within_ms > 0),
    state       TEXT NOT NULL DEFAULT 'open'
                CHECK (state IN ('open', 'reminded', 'overdue', 'met', 'cancelled')),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    reminded_at INTEGER,
    overdue_at  INTEGER,
    met_at      INTEGER,
    met_by      TEXT
);
CREATE INDEX idx_swarm_obligations_debtor ON swarm_obligations (debtor, state);
CREATE INDEX idx_swarm_obligations_creditor ON swarm_obligations (creditor, state);
CREATE INDEX idx_swarm_obligations_outstanding ON swarm_obligations (state)
    WHERE state IN ('open', 'reminded');
CREATE TRIGGER swarm_obligations_follow_their_message AFTER DELETE ON swarm_messages
BEGIN
    DELETE FROM swarm_obligations WHERE msg_id = OLD.msg_id;
END;
CREATE TRIGGER swarm_obligations_reopen_on_requeue AFTER UPDATE OF state ON swarm_messages
    WHEN OLD.state IN ('failed', 'expired') AND NEW.state = 'queued'
BEGIN
    UPDATE swarm_obligations
    SET state = 'open', reminded_at = NULL, overdue_at = NULL, updated_at = NEW.updated_at
    WHERE msg_id = NEW.msg_id AND state = 'cancelled';
END;
"""

# Which daemon delivers to which session: on a database several daemons share
# (PostgreSQL), each records the sessions its opencode has, and a message is handed off
# only by the daemon its target's route names (pigeond/storage/routes.py).  On a SQLite
# file, which one daemon alone opens, the table stays empty.
_V15_ROUTES = """
CREATE TABLE swarm_routes (
    session      TEXT PRIMARY KEY,
    daemon       TEXT NOT NULL,
    opencode_url TEXT NOT NULL,
    last_seen_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX idx_swarm_routes_daemon ON swarm_routes (daemon, last_seen_at);
"""

# Members of other runtimes than opencode (Claude Code sessions, MCP-only members): they
# say themselves that they exist (a Claude Code session's hooks, a member's own read), and
# where a Claude Code session's transcript is, which its hand-offs are verified in
# (pigeond/storage/members.py).  opencode's sessions are opencode's to know.
_V16_MEMBERS = """
CREATE TABLE swarm_members (
    session         TEXT PRIMARY KEY,
    runtime         TEXT NOT NULL,
    transcript_path TEXT,
    registered_at   INTEGER NOT NULL,
    last_seen_at    INTEGER NOT NULL
) WITHOUT ROWID;
"""

# The messages between two sessions, one direction at a time, by time (the pair
# brakes, pigeond/storage/pair_history.py): each send's judgement walks a range of it,
# newest first, and stops at its limit.  Without it the only index on to_session that
# reaches created_at goes through state and next_retry_at, so a judgement walked every
# message its target ever had.  Partial: a channel's own message has no target.
PAIR_HISTORY_INDEX = """
CREATE INDEX idx_swarm_pair
    ON swarm_messages (to_session, from_session, created_at)
    WHERE to_session IS NOT NULL;
"""

# Permission requests a session waits on while it handles a swarm message: the
# request as opencode asked it, the instance (directory) that holds it and must be answered
# in, and the message and sender being handled (pigeond/storage/permissions.py).  A row
# lives while the request is open: removed once it is answered, wherever that happens.
_PERMISSIONS = """
CREATE TABLE swarm_permissions (
    request_id   TEXT PRIMARY KEY,
    session      TEXT NOT NULL,
    directory    TEXT NOT NULL,
    permission   TEXT NOT NULL,
    patterns     TEXT NOT NULL,
    always       TEXT NOT NULL,
    call_id      TEXT,
    msg_id       TEXT NOT NULL,
    from_session TEXT NOT NULL,
    asked_at     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX idx_swarm_permissions_msg ON swarm_permissions (msg_id);
"""

Migration = Callable[[sqlite3.Connection], None]


def _script(sql: str) -> Migration:
    def apply(conn: sqlite3.Connection) -> None:
        # executescript would COMMIT first; run statement by statement instead
        # so the migration and its user_version bump share one transaction.
        for statement in _split_statements(sql):
            conn.execute(statement)

    return apply


def _split_statements(sql: str) -> list[str]:
    statements: list[str] = []
    pending = ""
    for line in sql.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        raise ValueError(f"incomplete SQL statement in migration: {pending.strip()[:60]}")
    return statements


MIGRATIONS: list[Migration] = [
    _script(_V1_SEED),
    _script(_V2_SEQUENCES),
    _script(_V3_DELIVERY),
    _script(_V4_HANDOFF_MODE),
    _script(_V5_RETENTION),
    _script(_V6_DROPPED),
    _script(_V7_DIRECT_STATE),
    _script(_V8_HANDOFF_INTENT),
    _script(_V9_ANSWERED),
    _script(_V10_OBLIGATIONS),
    _script(V11_NAMES),
    _script(V12_POLICIES),
    _script(V13_SEARCH),
    _script(V14_CHANNELS),
    _script(_V15_ROUTES),
    _script(_V16_MEMBERS),
    _script(V17_THREADS),
    _script(V18_BRAKES),
    _script(V19_TURNS),
    _script(_PERMISSIONS),
    _script(PAIR_HISTORY_INDEX),
    _script(V22_SENDER_PROOF),
    _script(V23_STEER),
    _script(V24_QUEUE_BYTES_SQLITE),
]

__all__ = [
    "CLEAR_PENDING_SQL",
    "INDEX_PENDING_SQL",
    "MIGRATIONS",
    "PAIR_HISTORY_INDEX",
    "PRIORITY_RANK_SQL",
    "PRUNABLE_SQL",
]
