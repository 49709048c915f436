"""The schema on PostgreSQL: one baseline, today's schema made at once, then migrations.

PostgreSQL was never deployed with an older schema, so a new database is made as it is
at :data:`BASELINE_VERSION` in one script, rather than by replaying SQLite's steps from
its first version.  Each migration after it is written for both engines: SQLite's in
:mod:`pigeond.storage.migrations`, PostgreSQL's in :data:`PG_MIGRATIONS` (version
``BASELINE_VERSION + 1`` onwards), so a database of either kind at one version answers
the repository's queries the same way.  A PostgreSQL database at a version older than the
baseline was made by a development build: it is refused, and made again.

What differs from SQLite's schema is how each engine says it:

- unix-millisecond times are ``BIGINT``;
- SQLite's triggers are PL/pgSQL trigger functions;
- the full-text index is a ``tsvector`` column PostgreSQL keeps itself (``GENERATED
  ... STORED``) under a GIN index, where SQLite needs FTS5 and a pending table;
- the version lives in ``swarm_schema`` rather than ``PRAGMA user_version``, and several
  daemons starting at once take turns to migrate (an advisory lock, held for the
  migration's transaction).

Released versions are never changed, as on SQLite.
"""

from __future__ import annotations

from typing import Final

from pigeond.storage.addressing_schema import PRUNABLE_SQL
from pigeond.storage.migrations import PAIR_HISTORY_INDEX, PRIORITY_RANK_SQL
from pigeond.storage.queue_bytes_schema import V24_QUEUE_BYTES_POSTGRES
from pigeond.storage.steer_schema import V23_STEER

# The channel an accept notifies with each target that got a message, and the SQL it
# runs (in its own transaction: delivered at the commit); every daemon LISTENs on it
# (pigeond/storage/postgres/notify.py, which the storage package itself never imports:
# it runs a thread for the daemon, and the CLIs load no Twisted).
DUE_CHANNEL: Final = "pigeond_due"
NOTIFY_SQL: Final = f"SELECT pg_notify('{DUE_CHANNEL}', t) FROM unnest(?::text[]) AS t"
# The same for the messages an accept group numbered ``?`` to ``?``: one statement whose
# answer nobody reads, so it goes out with the COMMIT (pigeond/storage/postgres/connection.py)
NOTIFY_ACCEPTED_SQL: Final = (
    f"SELECT pg_notify('{DUE_CHANNEL}', t) FROM (SELECT DISTINCT to_session AS t"
    " FROM swarm_messages WHERE accept_seq BETWEEN ? AND ? AND to_session IS NOT NULL) AS due"
)

# The channel every write transaction notifies (once: PostgreSQL folds a transaction's
# equal notifications into one), at its commit; a daemon's quiet tick reads again when it
# hears it (pigeond/service/quiet.py), as it does on SQLite when the file changes.
CHANGED_CHANNEL: Final = "pigeond_changed"
CHANGED_SQL: Final = f"SELECT pg_notify('{CHANGED_CHANNEL}', '')"

# The advisory lock key daemons take to migrate one at a time ("pigeond" in ASCII).
MIGRATION_LOCK: Final = 0x7069_6765_6F6E_64

VERSION_TABLE: Final = """
CREATE TABLE IF NOT EXISTS swarm_schema (
    only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    version  INTEGER NOT NULL
)
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

# The messages, in SQLite's column order (the search column last), and their indexes.
# Read pigeond/storage/migrations.py and its companions for why each is there.
_MESSAGES: Final = f"""
CREATE TABLE swarm_messages (
    msg_id            TEXT PRIMARY KEY,
    from_session      TEXT NOT NULL,
    to_session        TEXT,
    channel           TEXT,
    kind              TEXT NOT NULL,
    priority          TEXT NOT NULL DEFAULT 'normal',
    reply_to          TEXT,
    payload           TEXT NOT NULL,
    state             TEXT NOT NULL DEFAULT 'queued',
    attempts          INTEGER NOT NULL DEFAULT 0,
    next_retry_at     BIGINT,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    handed_off_at     BIGINT,
    last_error        TEXT,
    accept_seq        BIGINT,
    handoff_seq       BIGINT,
    verified_at       BIGINT,
    verify_by         BIGINT,
    requeue_count     INTEGER NOT NULL DEFAULT 0,
    expires_at        BIGINT,
    handoff_agent     TEXT,
    handoff_provider  TEXT,
    handoff_model     TEXT,
    handoff_variant   TEXT,
    handoff_note      TEXT,
    handoff_intent_at BIGINT,
    answered_at       BIGINT,
    answer_message_id TEXT,
    from_name         TEXT,
    to_name           TEXT,
    channel_msg_id    TEXT,
    thread_id         TEXT,
    hold_kind         TEXT CHECK (hold_kind IS NULL OR hold_kind IN ('consent', 'brake')),
    hold_brake        TEXT,
    hold_reason       TEXT,
    hold_ttl_ms       BIGINT,
    from_proof        TEXT NOT NULL DEFAULT 'unverified'
                      CHECK (from_proof IN ('pending', 'verified', 'person', 'unverified')),
    from_proof_note   TEXT,
    from_proof_call   TEXT,
    search_doc        tsvector GENERATED ALWAYS AS ({SEARCH_DOC_SQL}) STORED
);
CREATE UNIQUE INDEX idx_swarm_accept_seq ON swarm_messages (accept_seq);
CREATE INDEX idx_swarm_target_state
    ON swarm_messages (to_session, state, next_retry_at, created_at);
CREATE INDEX idx_swarm_inbox ON swarm_messages (to_session, state, msg_id);
CREATE INDEX idx_swarm_channel ON swarm_messages (channel, state, created_at);
CREATE INDEX idx_swarm_ready
    ON swarm_messages (state, next_retry_at, to_session) WHERE state = 'queued';
CREATE INDEX idx_swarm_target_head
    ON swarm_messages (to_session, {PRIORITY_RANK_SQL}, accept_seq) WHERE state = 'queued';
CREATE INDEX idx_swarm_handoff
    ON swarm_messages (to_session, handoff_seq) WHERE handoff_seq IS NOT NULL;
CREATE INDEX idx_swarm_expiry ON swarm_messages (expires_at)
    WHERE state = 'queued' AND to_session IS NOT NULL AND expires_at IS NOT NULL;
CREATE INDEX idx_swarm_unverified ON swarm_messages (to_session, verify_by)
    WHERE state = 'handed_off' AND verify_by IS NOT NULL;
CREATE INDEX idx_swarm_prunable ON swarm_messages (updated_at) WHERE {PRUNABLE_SQL};
CREATE INDEX idx_swarm_direct_state ON swarm_messages (state) WHERE to_session IS NOT NULL;
CREATE INDEX idx_swarm_unanswered ON swarm_messages (verified_at, to_session)
    WHERE state = 'handed_off' AND verified_at IS NOT NULL AND answered_at IS NULL;
CREATE INDEX idx_swarm_search ON swarm_messages USING gin (search_doc);
CREATE INDEX idx_swarm_channel_history ON swarm_messages (channel, accept_seq)
    WHERE to_session IS NULL;
CREATE INDEX idx_swarm_fanout ON swarm_messages (channel_msg_id)
    WHERE channel_msg_id IS NOT NULL;
CREATE INDEX idx_swarm_thread ON swarm_messages (thread_id, accept_seq)
    WHERE thread_id IS NOT NULL;
CREATE INDEX idx_swarm_brake_held ON swarm_messages (thread_id, accept_seq)
    WHERE hold_kind = 'brake';
CREATE INDEX idx_swarm_brake_held_target ON swarm_messages (to_session)
    WHERE hold_kind = 'brake';
CREATE INDEX idx_swarm_proof_pending ON swarm_messages (created_at)
    WHERE from_proof = 'pending';
CREATE UNIQUE INDEX idx_swarm_proof_call ON swarm_messages (from_session, from_proof_call)
    WHERE from_proof_call IS NOT NULL;
{PAIR_HISTORY_INDEX}
CREATE TABLE swarm_sequences (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
INSERT INTO swarm_sequences (name, value) VALUES ('accept', 0), ('handoff', 0);
"""

_OBLIGATIONS: Final = """
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

_ADDRESSING: Final = """
CREATE TABLE swarm_names (
    name         TEXT PRIMARY KEY,
    session      TEXT NOT NULL UNIQUE,
    claimed_at   BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL
);
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
CREATE TABLE swarm_policies (
    session     TEXT PRIMARY KEY,
    policy      TEXT NOT NULL CHECK (policy IN ('accept', 'hold', 'refuse')),
    allow       TEXT NOT NULL DEFAULT '[]' CHECK (json_typeof(allow::json) = 'array'),
    updated_at  BIGINT NOT NULL,
    updated_by  TEXT
);
CREATE TABLE swarm_channel_members (
    channel    TEXT NOT NULL,
    session    TEXT NOT NULL,
    joined_at  BIGINT NOT NULL,
    PRIMARY KEY (channel, session)
);
CREATE INDEX idx_swarm_member_session ON swarm_channel_members (session);
CREATE TABLE swarm_routes (
    session      TEXT PRIMARY KEY,
    daemon       TEXT NOT NULL,
    opencode_url TEXT NOT NULL,
    last_seen_at BIGINT NOT NULL
);
CREATE INDEX idx_swarm_routes_daemon ON swarm_routes (daemon, last_seen_at);
CREATE TABLE swarm_members (
    session         TEXT PRIMARY KEY,
    runtime         TEXT NOT NULL,
    transcript_path TEXT,
    registered_at   BIGINT NOT NULL,
    last_seen_at    BIGINT NOT NULL
);
"""

_THREADS: Final = """
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
CREATE TABLE swarm_brake_resets (
    scope    TEXT PRIMARY KEY,
    reset_at BIGINT NOT NULL
);
CREATE TABLE swarm_turns (
    turn_id            TEXT PRIMARY KEY,
    session            TEXT NOT NULL,
    turn_key           TEXT NOT NULL,
    recorded_at        BIGINT NOT NULL,
    input_tokens       BIGINT NOT NULL,
    output_tokens      BIGINT NOT NULL,
    reasoning_tokens   BIGINT NOT NULL,
    cache_read_tokens  BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    cost               DOUBLE PRECISION,
    UNIQUE (session, turn_key)
);
CREATE INDEX idx_swarm_turns_recorded ON swarm_turns (recorded_at);
CREATE TABLE swarm_turn_messages (
    msg_id  TEXT PRIMARY KEY,
    turn_id TEXT NOT NULL
);
CREATE INDEX idx_swarm_turn_messages_turn ON swarm_turn_messages (turn_id);
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

# The schema version the baseline makes: SQLite's version that has the same schema.
BASELINE_VERSION: Final = 22
# Today's schema, made at once in a new database (one script, one transaction).
BASELINE: Final = _MESSAGES + _OBLIGATIONS + _ADDRESSING + _THREADS

# Each migration after the baseline (version BASELINE_VERSION + 1 onwards), in order, each
# the same change as SQLite's of that version; each is run as one script in one transaction.
PG_MIGRATIONS: Final[tuple[str, ...]] = (V23_STEER, V24_QUEUE_BYTES_POSTGRES)

# The version a PostgreSQL database is brought to: always SQLite's schema version.
PG_SCHEMA_VERSION: Final = BASELINE_VERSION + len(PG_MIGRATIONS)
