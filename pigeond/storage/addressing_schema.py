"""The schema of addressing a swarm: names, consent, search and channels.

Migrations 11 to 14, as SQL text that :mod:`pigeond.storage.migrations` numbers and
applies, kept apart from the delivery schema (1 to 10) so that each module stays one
subject.  Released text is never changed: an old file is upgraded exactly as it always was.
"""

from __future__ import annotations

from typing import Final

# Names: a session claims a name (``reviewer``) and senders write ``to: "@reviewer"``; the
# name is resolved when the message is accepted and the row keeps both (``to_name``, and
# ``from_name``: the sender's name then), so the envelope and history show who was meant
# even after the name moves.  A session holds at most one name (claiming another gives the
# first up): a message's ``from_name`` is then never ambiguous.  ``last_seen_at`` is kept by
# the two triggers, in the writes that make it true (the send, the hand-off), whichever
# code path makes them (pigeond/storage/names.py).
V11_NAMES: Final = """
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

# Search: an FTS5 index over what a message says and who it is between (payload,
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
V13_SEARCH: Final = """
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
INDEX_PENDING_SQL: Final = (
    "INSERT INTO swarm_search (rowid, payload, kind, from_session, to_session, channel,"
    " from_name, to_name)"
    " SELECT m.accept_seq, m.payload, m.kind, m.from_session, m.to_session, m.channel,"
    " m.from_name, m.to_name"
    " FROM swarm_search_pending AS p CROSS JOIN swarm_messages AS m ON m.accept_seq = p.seq"
)
CLEAR_PENDING_SQL: Final = "DELETE FROM swarm_search_pending"

# Each session's consent (pigeond/consent.py): one row per session that is not on the
# default ``accept``, or has an allow-list.  The arbiter never reads this table: a held
# message is a queued row with no ``next_retry_at`` (never due, so the tick's query and
# its index are unchanged), written so by the accept and by every policy change in the
# same transaction (pigeond/storage/policies.py).  ``allow`` is a JSON array of senders.
# The CHECK lists pigeond.consent.POLICIES as they were at version 12 (a migration never
# changes; tests/test_policy_storage.py holds the two together).
V12_POLICIES: Final = """
CREATE TABLE swarm_policies (
    session     TEXT PRIMARY KEY,
    policy      TEXT NOT NULL CHECK (policy IN ('accept', 'hold', 'refuse')),
    allow       TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(allow)),
    updated_at  INTEGER NOT NULL,
    updated_by  TEXT
) WITHOUT ROWID;
"""


# Which rows are done, and so may be pruned once old enough: deliveries (a direct message,
# or a channel member's copy) verified in their target's transcript, failed, expired,
# cancelled or dropped; and every channel message itself (history: never delivered, its
# members' copies are).  Never a queued delivery, nor a hand-off still waiting to be
# verified.  The prunable index is partial on this expression and the pruner's queries say
# it word for word (SQLite uses a partial index only then), so the two must be the same
# text; changing it takes a migration that rebuilds the index (as 6 and 14 did).
PRUNABLE_SQL: Final = (
    "(to_session IS NULL OR state IN ('failed', 'expired', 'cancelled', 'dropped')"
    " OR (state = 'handed_off' AND verified_at IS NOT NULL))"
)

# Channels with fan-out (pigeond/storage/channels.py).  A session joins a channel (a row of
# swarm_channel_members); a message to the channel is stored as the channel message
# (to_session NULL, state 'fanned_out': the channel's history, never delivered itself) and,
# in the same transaction, one delivery row per member but the sender: to_session the
# member, channel kept, channel_msg_id naming the channel message.  A delivery is an
# ordinary queued row from there on (the arbiter, retries, expiry, notices, receipts and
# consent treat it as a direct message), so the prunable index must no longer call every
# row with a channel done: it is rebuilt on PRUNABLE_SQL.  Channel messages stored before
# this version were never delivered and never will be: they become 'fanned_out' (to no one).
# idx_swarm_channel_history pages a channel's history in accept order; idx_swarm_fanout
# finds a channel message's deliveries.
V14_CHANNELS: Final = f"""
CREATE TABLE swarm_channel_members (
    channel    TEXT NOT NULL,
    session    TEXT NOT NULL,
    joined_at  INTEGER NOT NULL,
    PRIMARY KEY (channel, session)
) WITHOUT ROWID;
CREATE INDEX idx_swarm_member_session ON swarm_channel_members (session);
ALTER TABLE swarm_messages ADD COLUMN channel_msg_id TEXT;
UPDATE swarm_messages SET state = 'fanned_out', next_retry_at = NULL
    WHERE to_session IS NULL AND channel IS NOT NULL AND state = 'queued';
DROP INDEX idx_swarm_prunable;
CREATE INDEX idx_swarm_prunable
    ON swarm_messages (updated_at)
    WHERE {PRUNABLE_SQL};
CREATE INDEX idx_swarm_channel_history
    ON swarm_messages (channel, accept_seq)
    WHERE to_session IS NULL;
CREATE INDEX idx_swarm_fanout
    ON swarm_messages (channel_msg_id)
    WHERE channel_msg_id IS NOT NULL;
"""
