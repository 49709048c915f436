"""Whether time alone can make anything due: what lets an idle daemon's tick skip its reads.

Every periodic job of the daemon (the arbiter's dispatch, the expiry sweep, the verifier,
the owed-replies sweep, the sender proofs, the permission poll) reads the database for
work that is due now.  Work becomes due in two ways: a write (a send, a hand-off, a
person's command, another process's) or the clock (a retry's backoff, an expiry, a
verification's grace, an owed reply's deadline).  Writes are noticed without SQL (see
pigeond/service/quiet.py); this is the one read that says when the clock can: never (no
open work at all), now (open work the jobs must look at on each tick), or at the earliest
deadline of an owed reply (the only open work that waits quietly for a set time).
"""

from __future__ import annotations

from pigeond.storage.base import RepositoryBase, reads
from pigeond.storage.obligations import ENDED_STATES
from pigeond.storage.receipts import UNANSWERED_SINCE

# Work the periodic jobs look at on every tick while it lasts: a hand-off not yet seen in
# its transcript, a seen message whose answer is still looked for, a sender proof to
# settle, a permission request open in opencode.
_OPEN_WORK_SQL = (
    "SELECT 1 FROM swarm_messages WHERE state = 'handed_off' AND verify_by IS NOT NULL"
    " UNION ALL SELECT 1 FROM swarm_messages WHERE from_proof = 'pending'"
    " UNION ALL SELECT 1 FROM swarm_permissions"
)
# When a queued message is next due: its retry time (idx_swarm_ready); a held one
# (consent, a brake: no retry time) only by its expiry, below.
_NEXT_RETRY_SQL = (
    "SELECT MIN(next_retry_at) FROM swarm_messages"
    " WHERE state = 'queued' AND next_retry_at IS NOT NULL AND to_session IS NOT NULL"
)
# When the first queued message expires (idx_swarm_expiry), held ones included.
_NEXT_EXPIRY_SQL = (
    "SELECT MIN(expires_at) FROM swarm_messages"
    " WHERE state = 'queued' AND to_session IS NOT NULL AND expires_at IS NOT NULL"
)
# The first moment an outstanding owed reply has a step due (0: one has now).
_NEXT_OBLIGATION_SQL = (
    "SELECT MIN(CASE"
    f" WHEN m.state IN {ENDED_STATES} THEN 0"
    " WHEN o.state = 'open' AND m.state = 'handed_off' THEN m.handed_off_at + o.within_ms"
    " WHEN o.state = 'reminded' THEN o.reminded_at + o.within_ms END)"
    " FROM swarm_obligations o JOIN swarm_messages m ON m.msg_id = o.msg_id"
    " WHERE o.state IN ('open', 'reminded')"
)


class TimedWork(RepositoryBase):
    @reads
    def timed_work_at(self, since_ms: int) -> int | None:
        """When the clock alone can make some periodic job's work due: None never (only a
        write can), 0 now (open work: the jobs read on every tick), else the ms of the
        first of a queued message's retry or expiry and an owed reply's next step (a
        time already past: due now).  ``since_ms``: seen messages seen before it are no
        longer looked at for an answer (the verifier's window)."""
        conn = self._conn
        if conn.execute(_OPEN_WORK_SQL + " LIMIT 1").fetchone() is not None:
            return 0
        unanswered = conn.execute(
            "SELECT 1" + self.engine.sql(UNANSWERED_SINCE) + " LIMIT 1", {"since": since_ms}
        ).fetchone()
        if unanswered is not None:
            return 0
        times = [
            row[0]
            for sql in (_NEXT_RETRY_SQL, _NEXT_EXPIRY_SQL, _NEXT_OBLIGATION_SQL)
            if (row := conn.execute(sql).fetchone()) is not None and row[0] is not None
        ]
        return min((int(t) for t in times), default=None)
