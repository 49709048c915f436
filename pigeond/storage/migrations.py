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

# The priority order, as one SQL expression: the ready-head index is built on
# it and the head query orders by it, so the two must be the same text.
PRIORITY_RANK_SQL = "(CASE priority WHEN 'urgent' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END)"

# Which rows are done, and so may be pruned once old enough: direct messages
# verified in their target's transcript, failed, expired, cancelled or dropped;
# and every channel message (stored, never delivered).  Never a queued direct
# message, nor a hand-off still waiting to be verified.  The prunable index is
# partial on this expression and the pruner's queries say it word for word
# (SQLite uses a partial index only then), so the two must be the same text;
# changing it takes a migration that rebuilds the index (as migration 6 did).
PRUNABLE_SQL = (
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
    WHERE {PRUNABLE_SQL};
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

# Names: a session claims a name (``reviewer``) and senders write ``to: "@reviewer"``; the
# name is resolved when the message is accepted and the row keeps both (``to_name``, and
# ``from_name``: the sender's name then), so the envelope and history show who was meant
# even after the name moves.  A session holds at most one name (claiming another gives the
# first up): a message's ``from_name`` is then never ambiguous.  ``last_seen_at`` is kept by
# the two triggers, in the writes that make it true (the send, the hand-off), whichever
# code path makes them (pigeond/storage/names.py).
_V11_NAMES = """
CREATE TABLE swarm_names (
    name         TEXT PRIMARY KEY,
    session      TEXT NOT NULL UNIQUE,
    claimed_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL
);
ALTER TABLE swarm_messages ADD COLUMN from_name TEXT;
ALTER TABLE swarm_messages ADD COLUMN to_name TEXT;
CREATE TRIGGER swarm_names_seen_sending AFTER INSERT ON swarm_messages
BEGIN
    UPDATE swarm_names SET last_seen_at = NEW.created_at
    WHERE session = NEW.from_session AND last_seen_at < NEW.created_at;
END;
CREATE TRIGGER swarm_names_seen_handed AFTER UPDATE OF handed_off_at ON swarm_messages
    WHEN NEW.handed_off_at IS NOT NULL AND NEW.to_session IS NOT NULL
BEGIN
    UPDATE swarm_names SET last_seen_at = NEW.handed_off_at
    WHERE session = NEW.to_session AND last_seen_at < NEW.handed_off_at;
END;
"""

# Search (issue 15): an FTS5 index over what a message says and who it is between (payload,
# kind, sender, target, channel, and the names migration 11 added), kept in step with
# swarm_messages by the triggers below, whoever writes (pigeond, ``pigeon``, ``sqlite3`` by
# hand).  External content: the text is not stored twice, the index holds only tokens.
# Its rowid is the message's accept_seq (unique, set at insert, never changed), not
# swarm_messages' rowid, which a VACUUM may renumber on a table without an INTEGER
# PRIMARY KEY.  A state change (hand-offs, requeues) touches no indexed column and costs
# the index nothing.
#
# An insert is not indexed by its own statement: row by row, one FTS5 insert per
# statement cost about 330 µs a message on a million-row index, against 8 µs for the
# same rows in one INSERT ... SELECT (bench/search_table.py), and an accept is one
# statement per message.  So the insert trigger only notes the accept_seq in
# swarm_search_pending, and the storage package's write transaction indexes what is
# noted in one statement before its COMMIT (INDEX_PENDING_SQL): a committed write of
# pigeond's leaves nothing pending.  A row inserted by hand waits in swarm_search_pending
# until pigeond's next write.  Deletes and updates are followed at once (a prune batch is
# one statement), and know a pending row is not in the index yet.  The 'rebuild' fills
# the index for the rows already there (6-11 s for a million here).
_V13_SEARCH = """
CREATE VIRTUAL TABLE swarm_search USING fts5 (
    payload, kind, from_session, to_session, channel, from_name, to_name,
    content = 'swarm_messages', content_rowid = 'accept_seq'
);
CREATE TABLE swarm_search_pending (seq INTEGER PRIMARY KEY);
CREATE TRIGGER swarm_search_insert AFTER INSERT ON swarm_messages
    WHEN NEW.accept_seq IS NOT NULL
BEGIN
    INSERT OR IGNORE INTO swarm_search_pending (seq) VALUES (NEW.accept_seq);
END;
CREATE TRIGGER swarm_search_delete AFTER DELETE ON swarm_messages
    WHEN OLD.accept_seq IS NOT NULL
BEGIN
    INSERT INTO swarm_search (swarm_search, rowid, payload, kind, from_session, to_session,
                              channel, from_name, to_name)
    SELECT 'delete', OLD.accept_seq, OLD.payload, OLD.kind, OLD.from_session,
           OLD.to_session, OLD.channel, OLD.from_name, OLD.to_name
    WHERE NOT EXISTS (SELECT 1 FROM swarm_search_pending WHERE seq = OLD.accept_seq);
    DELETE FROM swarm_search_pending WHERE seq = OLD.accept_seq;
END;
CREATE TRIGGER swarm_search_update
    AFTER UPDATE OF accept_seq, payload, kind, from_session, to_session, channel, from_name,
                    to_name
    ON swarm_messages
BEGIN
    INSERT INTO swarm_search (swarm_search, rowid, payload, kind, from_session, to_session,
                              channel, from_name, to_name)
    SELECT 'delete', OLD.accept_seq, OLD.payload, OLD.kind, OLD.from_session,
           OLD.to_session, OLD.channel, OLD.from_name, OLD.to_name
    WHERE OLD.accept_seq IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM swarm_search_pending WHERE seq = OLD.accept_seq);
    DELETE FROM swarm_search_pending WHERE seq = OLD.accept_seq;
    INSERT INTO swarm_search (rowid, payload, kind, from_session, to_session, channel,
                              from_name, to_name)
    SELECT NEW.accept_seq, NEW.payload, NEW.kind, NEW.from_session, NEW.to_session,
           NEW.channel, NEW.from_name, NEW.to_name
    WHERE NEW.accept_seq IS NOT NULL;
END;
INSERT INTO swarm_search (swarm_search) VALUES ('rebuild');
"""

# What the search triggers noted, indexed in one statement and forgotten: run by the
# storage package before each COMMIT (storage/base.py), and by bulk loaders.  CROSS JOIN
# keeps the few noted rows the outer loop, each message found by idx_swarm_accept_seq:
# without statistics the planner may otherwise walk every message (130 ms a write with a
# million rows).
INDEX_PENDING_SQL = (
    "INSERT INTO swarm_search (rowid, payload, kind, from_session, to_session, channel,"
    " from_name, to_name)"
    " SELECT m.accept_seq, m.payload, m.kind, m.from_session, m.to_session, m.channel,"
    " m.from_name, m.to_name"
    " FROM swarm_search_pending AS p CROSS JOIN swarm_messages AS m ON m.accept_seq = p.seq"
)
CLEAR_PENDING_SQL = "DELETE FROM swarm_search_pending"

# Each session's consent (pigeond/consent.py): one row per session that is not on the
# default ``accept``, or has an allow-list.  The arbiter never reads this table: a held
# message is a queued row with no ``next_retry_at`` (never due, so the tick's query and
# its index are unchanged), written so by the accept and by every policy change in the
# same transaction (pigeond/storage/policies.py).  ``allow`` is a JSON array of senders.
# The CHECK lists pigeond.consent.POLICIES as they were at version 12 (a migration never
# changes; tests/test_policy_storage.py holds the two together).
_V12_POLICIES = """
CREATE TABLE swarm_policies (
    session     TEXT PRIMARY KEY,
    policy      TEXT NOT NULL CHECK (policy IN ('accept', 'hold', 'refuse')),
    allow       TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(allow)),
    updated_at  INTEGER NOT NULL,
    updated_by  TEXT
) WITHOUT ROWID;
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
    _script(_V11_NAMES),
    _script(_V12_POLICIES),
    _script(_V13_SEARCH),
]
