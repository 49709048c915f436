"""The schema on PostgreSQL: the same numbered migrations as SQLite's, in its dialect.

Version N here makes the same tables, columns, indexes and rules as SQLite's version N
(:mod:`pigeond.storage.migrations`), so a database of either kind at one version answers
the repository's queries the same way.  What differs is how each engine says it:

- unix-millisecond times are ``BIGINT``;
- SQLite's triggers become PL/pgSQL trigger functions;
- the full-text index is a ``tsvector`` column PostgreSQL keeps itself (``GENERATED
  ... STORED``) under a GIN index, where SQLite needs FTS5 and a pending table;
- version 1 made two stand-ins for SQLite's functions, ``unlikely()`` and
  ``pigeond_json_each()``, which no query names any more: a query that needs them is
  written in each engine's form (pigeond/storage/engines/);
- the version lives in ``swarm_schema`` rather than ``PRAGMA user_version``, and several
  daemons starting at once take turns to migrate (an advisory lock, held for the
  migration's transaction).

Released versions are never changed, as on SQLite.
"""

from __future__ import annotations

from typing import Final

from pigeond.storage.addressing_schema import PRUNABLE_SQL
from pigeond.storage.costs_schema import V19_TURNS_PG
from pigeond.storage.migrations import PAIR_HISTORY_INDEX, PRIORITY_RANK_SQL
from pigeond.storage.postgres.thread_schema import PG_V17_THREADS, PG_V18_BRAKES
from pigeond.storage.sender_proof_schema import V22_SENDER_PROOF_PG

# The prunable expressions of versions 5 and 6, as SQLite's migrations made them.
_PRUNABLE_V5: Final = (
    "(channel IS NOT NULL OR state IN ('failed', 'expired', 'cancelled')"
    " OR (state = 'handed_off' AND verified_at IS NOT NULL))"
)
_PRUNABLE_V6: Final = (
    "(channel IS NOT NULL OR state IN ('failed', 'expired', 'cancelled', 'dropped')"
    " OR (state = 'handed_off' AND verified_at IS NOT NULL))"
)

# The channel an accept notifies with each target that got a message, and the SQL it
# runs (in its own transaction: delivered at the commit); every daemon LISTENs on it
# (pigeond/storage/postgres/notify.py, which the storage package itself never imports:
# it runs a thread for the daemon, and the CLIs load no Twisted).
DUE_CHANNEL: Final = "pigeond_due"
NOTIFY_SQL: Final = f"SELECT pg_notify('{DUE_CHANNEL}', t) FROM unnest(?::text[]) AS t"

# The advisory lock key daemons take to migrate one at a time ("pigeond" in ASCII).
MIGRATION_LOCK: Final = 0x7069_6765_6F6E_64

VERSION_TABLE: Final = """
CREATE TABLE IF NOT EXISTS swarm_schema (
    only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    version  INTEGER NOT NULL
)
"""

_V1: Final = """
CREATE FUNCTION unlikely(b BOOLEAN) RETURNS BOOLEAN
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT b';
CREATE FUNCTION pigeond_json_each(doc TEXT) RETURNS TABLE (value TEXT)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT json_array_elements_text(doc::json)';
CREATE TABLE swarm_messages (
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
    next_retry_at BIGINT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    handed_off_at BIGINT
);
CREATE INDEX idx_swarm_target_state
    ON swarm_messages (to_session, state, next_retry_at, created_at);
CREATE INDEX idx_swarm_inbox ON swarm_messages (to_session, state, msg_id);
CREATE INDEX idx_swarm_channel ON swarm_messages (channel, state, created_at);
"""

_V2: Final = f"""
ALTER TABLE swarm_messages ADD COLUMN last_error TEXT;
ALTER TABLE swarm_messages ADD COLUMN accept_seq BIGINT;
ALTER TABLE swarm_messages ADD COLUMN handoff_seq BIGINT;
CREATE TABLE swarm_sequences (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
INSERT INTO swarm_sequences (name, value)
    SELECT 'accept', COALESCE(MAX(accept_seq), 0) FROM swarm_messages;
INSERT INTO swarm_sequences (name, value)
    SELECT 'handoff', COALESCE(MAX(handoff_seq), 0) FROM swarm_messages;
CREATE INDEX idx_swarm_ready
    ON swarm_messages (state, next_retry_at, to_session) WHERE state = 'queued';
CREATE INDEX idx_swarm_target_head
    ON swarm_messages (to_session, {PRIORITY_RANK_SQL}, accept_seq) WHERE state = 'queued';
CREATE INDEX idx_swarm_handoff
    ON swarm_messages (to_session, handoff_seq) WHERE handoff_seq IS NOT NULL;
CREATE UNIQUE INDEX idx_swarm_accept_seq ON swarm_messages (accept_seq);
"""

_V3: Final = """
ALTER TABLE swarm_messages ADD COLUMN verified_at BIGINT;
ALTER TABLE swarm_messages ADD COLUMN verify_by BIGINT;
ALTER TABLE swarm_messages ADD COLUMN requeue_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE swarm_messages ADD COLUMN expires_at BIGINT;
CREATE INDEX idx_swarm_expiry ON swarm_messages (expires_at)
    WHERE state = 'queued' AND to_session IS NOT NULL AND expires_at IS NOT NULL;
CREATE INDEX idx_swarm_unverified ON swarm_messages (to_session, verify_by)
    WHERE state = 'handed_off' AND verify_by IS NOT NULL;
"""

_V4: Final = """
ALTER TABLE swarm_messages ADD COLUMN handoff_agent TEXT;
ALTER TABLE swarm_messages ADD COLUMN handoff_provider TEXT;
ALTER TABLE swarm_messages ADD COLUMN handoff_model TEXT;
ALTER TABLE swarm_messages ADD COLUMN handoff_variant TEXT;
ALTER TABLE swarm_messages ADD COLUMN handoff_note TEXT;
"""

_V5: Final = f"""
CREATE INDEX idx_swarm_prunable ON swarm_messages (updated_at) WHERE {_PRUNABLE_V5};
"""

_V6: Final = f"""
UPDATE swarm_messages SET state = 'dropped'
    WHERE kind = 'delivery.failed' AND state IN ('failed', 'expired');
DROP INDEX idx_swarm_prunable;
CREATE INDEX idx_swarm_prunable ON swarm_messages (updated_at) WHERE {_PRUNABLE_V6};
"""

_V7: Final = """
CREATE INDEX idx_swarm_direct_state ON swarm_messages (state) WHERE to_session IS NOT NULL;
"""

_V8: Final = """
ALTER TABLE swarm_messages ADD COLUMN handoff_intent_at BIGINT;
"""

_V9: Final = """
ALTER TABLE swarm_messages ADD COLUMN answered_at BIGINT;
ALTER TABLE swarm_messages ADD COLUMN answer_message_id TEXT;
CREATE INDEX idx_swarm_unanswered ON swarm_messages (verified_at, to_session)
    WHERE state = 'handed_off' AND verified_at IS NOT NULL AND answered_at IS NULL;
"""

_V10: Final = """
CREATE TABLE swarm_obligations (
    msg_id      TEXT PRIMARY KEY,
    debtor      TEXT NOT NULL,
    creditor    TEXT NOT NULL,
    within_ms   BIGINT NOT NULL CHECK (within_ms > 0),
    state       TEXT NOT NULL DEFAULT 'open'
                CHECK (state IN ('open', 'reminded', 'overdue', 'met', 'cancelled')),
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    reminded_at BIGINT,
    overdue_at  BIGINT,
    met_at      BIGINT,
    met_by      TEXT
);
CREATE INDEX idx_swarm_obligations_debtor ON swarm_obligations (debtor, state);
CREATE INDEX idx_swarm_obligations_creditor ON swarm_obligations (creditor, state);
CREATE INDEX idx_swarm_obligations_outstanding ON swarm_obligations (state)
    WHERE state IN ('open', 'reminded');
CREATE FUNCTION swarm_obligations_follow_their_message() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM swarm_obligations WHERE msg_id = OLD.msg_id;
    RETURN NULL;
END $$;
CREATE TRIGGER swarm_obligations_follow_their_message AFTER DELETE ON swarm_messages
    FOR EACH ROW EXECUTE FUNCTION swarm_obligations_follow_their_message();
CREATE FUNCTION swarm_obligations_reopen_on_requeue() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    UPDATE swarm_obligations
    SET state = 'open', reminded_at = NULL, overdue_at = NULL, updated_at = NEW.updated_at
    WHERE msg_id = NEW.msg_id AND state = 'cancelled';
    RETURN NULL;
END $$;
CREATE TRIGGER swarm_obligations_reopen_on_requeue AFTER UPDATE OF state ON swarm_messages
    FOR EACH ROW WHEN (OLD.state IN ('failed', 'expired') AND NEW.state = 'queued')
    EXECUTE FUNCTION swarm_obligations_reopen_on_requeue();
"""

_V11: Final = """
CREATE TABLE swarm_names (
    name         TEXT PRIMARY KEY,
    session      TEXT NOT NULL UNIQUE,
    claimed_at   BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL
);
ALTER TABLE swarm_messages ADD COLUMN from_name TEXT;
ALTER TABLE swarm_messages ADD COLUMN to_name TEXT;
CREATE FUNCTION swarm_names_seen_sending() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE swarm_names SET last_seen_at = NEW.created_at
    WHERE session = NEW.from_session AND last_seen_at < NEW.created_at;
    RETURN NULL;
END $$;
CREATE TRIGGER swarm_names_seen_sending AFTER INSERT ON swarm_messages
    FOR EACH ROW EXECUTE FUNCTION swarm_names_seen_sending();
CREATE FUNCTION swarm_names_seen_handed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE swarm_names SET last_seen_at = NEW.handed_off_at
    WHERE session = NEW.to_session AND last_seen_at < NEW.handed_off_at;
    RETURN NULL;
END $$;
CREATE TRIGGER swarm_names_seen_handed AFTER UPDATE OF handed_off_at ON swarm_messages
    FOR EACH ROW WHEN (NEW.handed_off_at IS NOT NULL AND NEW.to_session IS NOT NULL)
    EXECUTE FUNCTION swarm_names_seen_handed();
"""

_V12: Final = """
CREATE TABLE swarm_policies (
    session     TEXT PRIMARY KEY,
    policy      TEXT NOT NULL CHECK (policy IN ('accept', 'hold', 'refuse')),
    allow       TEXT NOT NULL DEFAULT '[]' CHECK (json_typeof(allow::json) = 'array'),
    updated_at  BIGINT NOT NULL,
    updated_by  TEXT
);
"""

# The words of a message, as SQLite's FTS5 index holds them: the same seven columns, each
# split by the 'simple' configuration (lower case, no stemming, no stop words).
# Punctuation separates words, as in FTS5's unicode61 tokenizer (``ses_ab`` is ``ses ab``,
# ``team.backend`` is ``team backend``): the query's words are split the same way.
SEARCH_DOC_SQL: Final = (
    "to_tsvector('simple', regexp_replace("
    "coalesce(payload, '') || ' ' || coalesce(kind, '') || ' '"
    " || coalesce(from_session, '') || ' ' || coalesce(to_session, '') || ' '"
    " || coalesce(channel, '') || ' ' || coalesce(from_name, '') || ' '"
    " || coalesce(to_name, ''), '[[:punct:]]', ' ', 'g'))"
)
_V13: Final = f"""
ALTER TABLE swarm_messages ADD COLUMN search_doc tsvector
    GENERATED ALWAYS AS ({SEARCH_DOC_SQL}) STORED;
CREATE INDEX idx_swarm_search ON swarm_messages USING gin (search_doc);
"""

_V14: Final = f"""
CREATE TABLE swarm_channel_members (
    channel    TEXT NOT NULL,
    session    TEXT NOT NULL,
    joined_at  BIGINT NOT NULL,
    PRIMARY KEY (channel, session)
);
CREATE INDEX idx_swarm_member_session ON swarm_channel_members (session);
ALTER TABLE swarm_messages ADD COLUMN channel_msg_id TEXT;
UPDATE swarm_messages SET state = 'fanned_out', next_retry_at = NULL
    WHERE to_session IS NULL AND channel IS NOT NULL AND state = 'queued';
DROP INDEX idx_swarm_prunable;
CREATE INDEX idx_swarm_prunable ON swarm_messages (updated_at) WHERE {PRUNABLE_SQL};
CREATE INDEX idx_swarm_channel_history ON swarm_messages (channel, accept_seq)
    WHERE to_session IS NULL;
CREATE INDEX idx_swarm_fanout ON swarm_messages (channel_msg_id)
    WHERE channel_msg_id IS NOT NULL;
"""

_V15: Final = """
CREATE TABLE swarm_routes (
    session      TEXT PRIMARY KEY,
    daemon       TEXT NOT NULL,
    opencode_url TEXT NOT NULL,
    last_seen_at BIGINT NOT NULL
);
CREATE INDEX idx_swarm_routes_daemon ON swarm_routes (daemon, last_seen_at);
"""

_V16: Final = """
CREATE TABLE swarm_members (
    session         TEXT PRIMARY KEY,
    runtime         TEXT NOT NULL,
    transcript_path TEXT,
    registered_at   BIGINT NOT NULL,
    last_seen_at    BIGINT NOT NULL
);
"""

_PERMISSIONS: Final = """
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
    asked_at     BIGINT NOT NULL
);
CREATE INDEX idx_swarm_permissions_msg ON swarm_permissions (msg_id);
"""

# One entry per version, in order; each is run as one script in one transaction.
PG_MIGRATIONS: Final = (
    _V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12, _V13, _V14, _V15, _V16,
    PG_V17_THREADS,
    PG_V18_BRAKES,
    V19_TURNS_PG,
    _PERMISSIONS,
    PAIR_HISTORY_INDEX,  # the pair brakes' index: the same statement on both engines
    V22_SENDER_PROOF_PG,
)  # fmt: skip
