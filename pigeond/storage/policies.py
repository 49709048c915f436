"""Each session's consent, as SQL: the ``swarm_policies`` rows and the held messages.

A held message is a queued direct message with no ``next_retry_at`` and ``hold_kind =
'consent'`` (migration 18; a brake's holds are storage/brake_holds.py's): never due, so the
arbiter's per-tick query (``READY_TARGETS_SQL``, a range on ``next_retry_at``) and its
index stay exactly as they were, and no policy is read per tick.  ``ready_batch`` steps
over held rows, so a sender on the allow-list is not stuck behind them.  A held message
stays ``queued``: it expires as usual (the sweep walks ``expires_at``), notifies its
sender then, and spends no attempt, since it is never handed off.

Every policy change applies itself to the messages already waiting, in its own
transaction: ``accept`` releases every held message of the session; ``hold`` and
``refuse`` hold every waiting message whose sender is not on the allow-list (and release
those whose sender now is).  The allow-list admits only a sender pigeond verified (or is
still verifying: storage/sender_proofs.py holds it if it settles unverified).  An
``@name`` entry lets through the messages whose
``from_name`` is that name: the name their sender held when they were accepted, as the
send path judged them (a name claimed later does not release what was held before it).
A message in doubt (``handoff_intent_at`` set: it may be in the transcript already) is
never held.  Released messages are due at once, in their old order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pigeond.consent import DEFAULT_POLICY, InboundPolicy, Policy, held_reason, parse_allow
from pigeond.storage.base import Connection, RepositoryBase, reads
from pigeond.storage.engines import json_texts

POLICY_COLUMNS = "session, policy, allow, updated_at, updated_by, steer"
# The waiting messages of one session, by the head-of-queue index (to_session first).
_WAITING = "to_session = :session AND state = 'queued'"
# Held by consent, not by a conversation brake (storage/brake_holds.py): a policy neither
# holds nor releases what a brake holds for a person.
_CONSENT_HELD = "hold_kind = 'consent' AND next_retry_at IS NULL"
# The message's sender is on :allow (a JSON list): by its ``from``, or by its ``from_name``
# with the ``@``.  EXISTS, not ``IN``: a message without a name has a NULL ``'@' || from_name``,
# and ``NOT (x IN (...))`` would be NULL, never true, for it.
# Only a sender whose proof may admit it (verified, or pending: never handed off before it
# settles, and settled unverified it is judged again): consent.InboundPolicy.verdict.
_ALLOWED = json_texts(":allow").map(
    lambda allow: (
        f"(from_proof IN ('verified', 'pending') AND EXISTS (SELECT 1 FROM {allow}"
        " WHERE value IN (from_session, '@' || from_name)))"
    )
)


@dataclass(frozen=True, slots=True)
class PolicyChange:
    """What a policy change did: the policy now in force, and how many waiting messages it
    held and released."""

    policy: InboundPolicy
    held: int
    released: int


def _row_to_policy(row: tuple[object, ...]) -> InboundPolicy:
    session, policy, allow, updated_at, updated_by, steer = row
    return InboundPolicy(
        session=str(session),
        policy=Policy(str(policy)),
        allow=parse_allow(json.loads(str(allow))),
        updated_at=int(str(updated_at)),
        updated_by=None if updated_by is None else str(updated_by),
        steer=bool(steer),
    )


class Policies(RepositoryBase):
    @reads
    def policies(self) -> list[InboundPolicy]:
        """Every stored policy (a few rows: only sessions that set one), by session."""
        rows = self._conn.execute(f"SELECT {POLICY_COLUMNS} FROM swarm_policies ORDER BY session")
        return [_row_to_policy(r) for r in rows.fetchall()]

    @reads
    def policy_of(self, session: str) -> InboundPolicy:
        """``session``'s policy; the default (``accept``, nobody listed) if it set none."""
        row = self._conn.execute(
            f"SELECT {POLICY_COLUMNS} FROM swarm_policies WHERE session = ?", (session,)
        ).fetchone()
        return InboundPolicy(session, DEFAULT_POLICY) if row is None else _row_to_policy(row)

    @reads
    def held_counts(self) -> dict[str, int]:
        """Held messages per target: searches idx_swarm_target_head's queued rows of the
        sessions that hold (a few), never the history."""
        rows = self._conn.execute(
            "SELECT m.to_session, COUNT(*) FROM swarm_policies p"
            " JOIN swarm_messages m ON m.to_session = p.session AND m.state = 'queued'"
            " WHERE m.hold_kind = 'consent' AND m.next_retry_at IS NULL GROUP BY m.to_session"
        )
        return {str(t): int(n) for t, n in rows.fetchall()}

    def set_policy(
        self,
        session: str,
        policy: Policy,
        allow: tuple[str, ...] | None,
        now_ms: int,
        updated_by: str | None,
        steer: bool | None = False,
    ) -> PolicyChange:
        """Store ``session``'s policy and apply it to its waiting messages, in one
        transaction.  ``allow`` or ``steer`` None keeps what is stored (merged in this
        transaction: a change another writer made since the caller read is kept, never
        put back).  The default (``accept``, no allow-list, no steering) deletes the row:
        it needs none."""
        with self._write() as conn:
            row = conn.execute(
                f"INSERT INTO swarm_policies ({POLICY_COLUMNS}) VALUES (:session, :policy,"
                " coalesce(:allow, '[]'), :now, :by, coalesce(:steer, 0))"
                " ON CONFLICT (session) DO UPDATE SET policy = excluded.policy,"
                " allow = coalesce(:allow, swarm_policies.allow),"
                " updated_at = excluded.updated_at, updated_by = excluded.updated_by,"
                f" steer = coalesce(:steer, swarm_policies.steer) RETURNING {POLICY_COLUMNS}",
                {"session": session, "policy": policy.value, "now": now_ms, "by": updated_by,
                 "allow": None if allow is None else json.dumps(list(allow)),
                 "steer": None if steer is None else int(steer)},
            ).fetchone()  # fmt: skip
            stored = _row_to_policy(row)
            if stored.is_default:
                conn.execute("DELETE FROM swarm_policies WHERE session = ?", (session,))
            held, released = self._apply(conn, stored, now_ms)
        return PolicyChange(stored, held, released)

    def release_held(self, session: str, now_ms: int) -> int:
        """Release every message held for ``session`` now, whatever its policy (which
        stays: later messages are held again); returns how many."""
        with self._write() as conn:
            return self._release(conn, session, now_ms, None)

    def reapply_policy(self, policy: InboundPolicy, now_ms: int) -> tuple[int, int]:
        """Apply a policy written by another process to the waiting messages again: the
        daemon accepted some under the policy it knew until it read the new one."""
        with self._write() as conn:
            return self._apply(conn, policy, now_ms)

    def _apply(self, conn: Connection, policy: InboundPolicy, now_ms: int) -> tuple[int, int]:
        if policy.policy is Policy.ACCEPT:
            return 0, self._release(conn, policy.session, now_ms, None)
        released = self._release(conn, policy.session, now_ms, policy.allow)
        held = conn.execute(
            "UPDATE swarm_messages SET next_retry_at = NULL, last_error = :why,"
            " hold_kind = 'consent', updated_at = :now"
            f" WHERE {_WAITING} AND next_retry_at IS NOT NULL AND handoff_intent_at IS NULL"
            f" AND NOT {self.engine.sql(_ALLOWED)}",
            {"session": policy.session, "now": now_ms, "allow": json.dumps(list(policy.allow)),
             "why": held_reason(policy.session, policy.policy)},
        ).rowcount  # fmt: skip
        return held, released

    def _release(
        self,
        conn: Connection,
        session: str,
        now_ms: int,
        only_from: tuple[str, ...] | None,
    ) -> int:
        """Held messages of ``session`` become due now: all of them (``only_from`` None),
        or those whose sender (or ``@`` and its ``from_name``) ``only_from`` lists."""
        return int(
            conn.execute(
                "UPDATE swarm_messages SET next_retry_at = :now, last_error = NULL,"
                f" hold_kind = NULL, updated_at = :now WHERE {_WAITING} AND {_CONSENT_HELD}"
                f" AND (:any OR {self.engine.sql(_ALLOWED)})",
                {
                    "session": session,
                    "now": now_ms,
                    "any": only_from is None,
                    "allow": json.dumps(list(only_from or ())),
                },
            ).rowcount
        )

    def _hold_new(self, conn: Connection, msg_id: str, why: str) -> None:
        """Inside the accept: the message just stored waits for its target's consent."""
        conn.execute(
            "UPDATE swarm_messages SET next_retry_at = NULL, last_error = ?,"
            " hold_kind = 'consent' WHERE msg_id = ?",
            (why, msg_id),
        )

    def _consent_again(self, conn: Connection, target: str, now_ms: int) -> None:
        """Inside a brake release: the released message meets its target's consent as a
        new send does (held again if the policy the target set holds its sender)."""
        policy = self.policy_of(target)
        if policy.policy is not Policy.ACCEPT:
            self._apply(conn, policy, now_ms)
