"""A drain step's writes and its next read, in one transaction.

A drain hands a target its queue a batch at a time (pigeond/delivery/drain.py).  Each
batch needed three trips to the database threads: its read, its intent (committed before
the call: pigeond/storage/intents.py) and, once opencode took it, its hand-off record,
two of them commits.  Under load those trips, each a queue, a thread wake-up and a
result sent back through the reactor's waker, cost more than the queries.  So one step
is one transaction on the writer: the hand-off just taken is recorded, and the next due
head of the queue is read and its intent marked, before the one commit.  Which of the
head goes (the batch's byte bound, a steering batch's cut) is the caller's choice,
``choose``, made inside the transaction.  A step may also clear intents marked ahead
for a batch that was not sent after all (the drain stopped, or waited for a turn and
reads the queue again), so nothing the process still owns is left in doubt.

Exactly once across a crash is kept as before: every message is sent only after a commit
that holds its intent, and a crash after that commit leaves it in doubt, to be looked for
in the transcript (pigeond/delivery/recovery.py).  A head that holds a message already in
doubt is not claimed: the caller ends that doubt first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pigeond.model import StoredMessage
from pigeond.storage.delivery import DeliveryTransitions, HandOffGroup
from pigeond.storage.engines.base import Cursor
from pigeond.storage.intents import CLAIM_SQL

# Clearing an intent marked ahead for a batch that was not sent: still queued, due as it was.
RELEASE_SQL = (
    "UPDATE swarm_messages SET handoff_intent_at = NULL WHERE msg_id = ? AND state = 'queued'"
)


@dataclass(frozen=True, slots=True)
class DrainStep:
    """One target's step: the prompt just taken (recorded), intents to clear, and whether
    to read the next head (``read_limit`` > 0: at most that many, due at ``now_ms``)."""

    target: str
    now_ms: int
    handed_off: HandOffGroup | None = None
    released: Sequence[str] = ()
    read_limit: int = 0


@dataclass(frozen=True, slots=True)
class StepResult:
    """What a step wrote and read: the hand-off's ids recorded, the head read, and the ids
    of the head whose intent this transaction marked (the only ones to send)."""

    handed_off: list[str] = field(default_factory=list)
    due: list[StoredMessage] = field(default_factory=list)
    claimed: list[str] = field(default_factory=list)


# ``choose(i, due)``: which of step ``i``'s head to claim (its first ones), none to leave it.
Choose = Callable[[int, list[StoredMessage]], Sequence[str]]


class DrainSteps(DeliveryTransitions):
    def drain_steps(self, steps: Sequence[DrainStep], choose: Choose) -> list[StepResult]:
        """Every step in one transaction and one commit (under load, many targets' steps);
        all or nothing.  A head with a message in doubt is read, never claimed."""
        claim = self.engine.sql(CLAIM_SQL)
        read: list[tuple[list[str], list[StoredMessage], list[tuple[str, Cursor]]]] = []
        with self._write() as conn:
            for i, step in enumerate(steps):
                done = self._hand_off(conn, *step.handed_off) if step.handed_off else []
                for msg_id in step.released:
                    conn.execute(RELEASE_SQL, (msg_id,))
                due = (
                    self.ready_batch(step.target, step.now_ms, step.read_limit)
                    if step.read_limit > 0
                    else []
                )
                claims = []
                if due and all(m.handoff_intent_at is None for m in due):
                    for msg_id in choose(i, due):
                        claims.append(
                            (msg_id, conn.execute(claim, (step.now_ms, step.now_ms, msg_id)))
                        )
                read.append((done, due, claims))
        # a claim's count read after the commit: on PostgreSQL it came with the COMMIT's
        # answer rather than in a round trip of its own
        return [
            StepResult(done, due, [msg_id for msg_id, cursor in claims if cursor.rowcount])
            for done, due, claims in read
        ]
