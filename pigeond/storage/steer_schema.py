"""The schema of steering (opencode 2.x ``delivery: "steer"``): migration 23, the same
text on SQLite and PostgreSQL.

``swarm_messages.steer``: the sender asked that the message go into its target's running
turn (only an urgent message may ask: the send path refuses the rest).
``swarm_policies.steer``: the session allows it; rows stored before this version never
did, and the default stays off, since a steer lands inside a turn a person may be
watching.  Both are 0 or 1 (neither engine's boolean is the other's).  Released text is
never changed.
"""

from __future__ import annotations

from typing import Final

V23_STEER: Final = """
ALTER TABLE swarm_messages ADD COLUMN steer INTEGER NOT NULL DEFAULT 0
    CHECK (steer IN (0, 1));
ALTER TABLE swarm_policies ADD COLUMN steer INTEGER NOT NULL DEFAULT 0
    CHECK (steer IN (0, 1));
"""
