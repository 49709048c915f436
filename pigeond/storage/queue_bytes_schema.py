"""The queue's bytes kept as a number: migration 24, one text per engine.

``max_queued_bytes`` is checked at every group commit of accepts; summing the queued rows'
payloads for it cost what the queue holds (0.3 ms with 1,000 queued, 150 ms with 100,000:
bench/queue_bytes_table.py).  ``swarm_queue_bytes`` holds that sum in its one row instead,
and triggers on ``swarm_messages`` keep it in step in the transaction of every write that
changes it, whoever makes it (an accept, a hand-off, an expiry, a cancel, a prune, an edit,
a ``pigeon`` command of another process): a row counts while its state is ``queued``,
with its payload's UTF-8 bytes (SQLite's ``length()`` of a blob; PostgreSQL's
``octet_length``), as the sum counted them.  The migration fills the row with the sum of
the rows already there, so it is durable like the rest: a restart reads it, nothing is
rebuilt.  Released text is never changed.
"""

from __future__ import annotations

from typing import Final

_TABLE: Final = """
CREATE TABLE swarm_queue_bytes (
    only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
    total    BIGINT NOT NULL
);
"""

V24_QUEUE_BYTES_SQLITE: Final = (
    _TABLE
    + """
INSERT INTO swarm_queue_bytes (only_row, total)
    SELECT 1, COALESCE(SUM(length(CAST(payload AS BLOB))), 0) FROM swarm_messages
    WHERE state = 'queued';
CREATE TRIGGER swarm_queue_bytes_insert AFTER INSERT ON swarm_messages
    WHEN NEW.state = 'queued'
BEGIN
    UPDATE swarm_queue_bytes SET total = total + length(CAST(NEW.payload AS BLOB));
END;
CREATE TRIGGER swarm_queue_bytes_delete AFTER DELETE ON swarm_messages
    WHEN OLD.state = 'queued'
BEGIN
    UPDATE swarm_queue_bytes SET total = total - length(CAST(OLD.payload AS BLOB));
END;
CREATE TRIGGER swarm_queue_bytes_update AFTER UPDATE OF state, payload ON swarm_messages
    WHEN (OLD.state = 'queued' OR NEW.state = 'queued')
        AND (OLD.state IS NOT NEW.state OR OLD.payload IS NOT NEW.payload)
BEGIN
    UPDATE swarm_queue_bytes SET total = total
        + (CASE WHEN NEW.state = 'queued' THEN length(CAST(NEW.payload AS BLOB)) ELSE 0 END)
        - (CASE WHEN OLD.state = 'queued' THEN length(CAST(OLD.payload AS BLOB)) ELSE 0 END);
END;
"""
)

V24_QUEUE_BYTES_POSTGRES: Final = (
    _TABLE
    + """
INSERT INTO swarm_queue_bytes (only_row, total)
    SELECT 1, COALESCE(SUM(octet_length(payload)), 0) FROM swarm_messages
    WHERE state = 'queued';
CREATE FUNCTION swarm_queue_bytes_follow() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta BIGINT := 0;
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.state = 'queued' THEN
        delta := delta + octet_length(NEW.payload);
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') AND OLD.state = 'queued' THEN
        delta := delta - octet_length(OLD.payload);
    END IF;
    IF delta <> 0 THEN
        UPDATE swarm_queue_bytes SET total = total + delta;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER swarm_queue_bytes_insert AFTER INSERT ON swarm_messages
    FOR EACH ROW WHEN (NEW.state = 'queued') EXECUTE FUNCTION swarm_queue_bytes_follow();
CREATE TRIGGER swarm_queue_bytes_delete AFTER DELETE ON swarm_messages
    FOR EACH ROW WHEN (OLD.state = 'queued') EXECUTE FUNCTION swarm_queue_bytes_follow();
CREATE TRIGGER swarm_queue_bytes_update AFTER UPDATE OF state, payload ON swarm_messages
    FOR EACH ROW WHEN ((OLD.state = 'queued' OR NEW.state = 'queued')
        AND (OLD.state IS DISTINCT FROM NEW.state OR OLD.payload IS DISTINCT FROM NEW.payload))
    EXECUTE FUNCTION swarm_queue_bytes_follow();
"""
)
