"""Owed replies: who owes whom a reply, and the reminder and notice when none comes.

A send that expects a reply makes one ``swarm_obligations`` row in the send's own
transaction (so a 202 means the obligation is on disk too): the target is the debtor,
the sender the creditor.  A message from the debtor whose ``reply_to`` is that msg_id
meets it, again in the reply's own transaction.  The sweep (:meth:`sweep_obligations`,
run by pigeond/delivery/reminders.py) takes each outstanding row one step:

    open ──within after the hand-off──▶ reminded ──within after that──▶ overdue
      │                                   │                               │
      └──────────── the debtor's reply (reply_to = msg_id) ───────────────┴──▶ met
    open / reminded ──the original failed, expired, was cancelled or dropped──▶ cancelled

The reminder (``reply.reminder``, to the debtor) and the notice (``reply.overdue``, to
the creditor) are queued messages from ``pigeond``, made in the same transaction as the
step, so a crash can neither lose one nor send one twice.  The clock starts at the
hand-off, not at the send: a message that waited in the queue was not yet owed.
Times come in as unix milliseconds: nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pigeond.ids import make_msg_id
from pigeond.model import (
    NOTICE_SENDER,
    OVERDUE_KIND,
    REMINDER_KIND,
    SESSION_ID_RE,
    NewMessage,
    first_line,
)
from pigeond.owed_replies import OUTSTANDING, Obligation, Owed
from pigeond.storage.base import NOTICE_SENDER_CLAIM, Connection, RepositoryBase, reads

# The original's states in which nobody can answer it any more.
ENDED_STATES = "('failed', 'expired', 'cancelled', 'dropped')"
_OUTSTANDING_SQL = "(" + ", ".join(f"'{s}'" for s in OUTSTANDING) + ")"
# How much of a payload is read to quote its first line.
_QUOTED_CHARS = 400
_OBLIGATION_SQL = (
    "SELECT o.msg_id, o.debtor, o.creditor, o.within_ms, o.state, o.created_at,"
    " o.updated_at, o.reminded_at, o.overdue_at, o.met_at, o.met_by,"
    f" m.kind, substr(m.payload, 1, {_QUOTED_CHARS}), m.handed_off_at"
    " FROM swarm_obligations o JOIN swarm_messages m ON m.msg_id = o.msg_id"
)
# Outstanding obligations with a step due at :now (or whose original has ended): the
# partial idx_swarm_obligations_outstanding, then the message by its primary key.
DUE_SQL = (
    f"{_OBLIGATION_SQL} WHERE o.state IN ('open', 'reminded') AND ("
    f" m.state IN {ENDED_STATES}"
    " OR (o.state = 'open' AND m.state = 'handed_off' AND m.handed_off_at + o.within_ms <= :now)"
    " OR (o.state = 'reminded' AND o.reminded_at + o.within_ms <= :now))"
    " ORDER BY o.created_at LIMIT :limit"
)
# The most obligations one sweep steps: the rest wait for the next (a second later).
SWEEP_LIMIT = 200
# The most obligations of one side a listing shows.
LIST_LIMIT = 500


def _obligation(row: tuple[object, ...]) -> Obligation:
    *head, payload, handed_off_at = row
    return Obligation(*head, first_line(str(payload)), handed_off_at)  # type: ignore[arg-type,call-arg]


@dataclass
class ObligationSweep:
    """What one sweep did: the sessions it queued a reminder or notice for (to kick),
    and how many obligations took each step."""

    targets: list[str] = field(default_factory=list)
    reminded: int = 0
    overdue: int = 0
    cancelled: int = 0


@dataclass(frozen=True, slots=True)
class OwedList:
    """What a session owes (it is the debtor) and is owed (the creditor), outstanding only."""

    owes: list[Obligation]
    owed: list[Obligation]


class Obligations(RepositoryBase):
    notice_ttl_ms: int

    # -- inside a send's transaction ---------------------------------------------------

    def _owe(self, conn: Connection, message: NewMessage, within_ms: int, now_ms: int) -> None:
        """The target of ``message`` now owes its sender a reply."""
        assert message.to_session is not None and within_ms > 0
        conn.execute(
            "INSERT INTO swarm_obligations (msg_id, debtor, creditor, within_ms,"
            " state, created_at, updated_at) VALUES (?, ?, ?, ?, 'open', ?, ?)"
            " ON CONFLICT DO NOTHING",
            (message.msg_id, message.to_session, message.from_session, within_ms, now_ms, now_ms),
        )

    def _meet(self, conn: Connection, reply: NewMessage, now_ms: int) -> None:
        """``reply`` meets the obligation it answers, if its sender is the debtor; an
        overdue one is met late (the creditor may still be waiting)."""
        conn.execute(
            "UPDATE swarm_obligations SET state = 'met', met_at = ?, met_by = ?, updated_at = ?"
            f" WHERE msg_id = ? AND debtor = ? AND state IN {_OUTSTANDING_SQL}",
            (now_ms, reply.msg_id, now_ms, reply.reply_to, reply.from_session),
        )

    # -- the sweep ---------------------------------------------------------------------

    @reads
    def obligations_due(self, now_ms: int) -> bool:
        """Whether :meth:`sweep_obligations` has anything to do (a read: most seconds,
        nothing is due, and the sweep then takes no write lock)."""
        row = self._conn.execute(DUE_SQL, {"now": now_ms, "limit": 1}).fetchone()
        return row is not None

    def sweep_obligations(self, now_ms: int, limit: int = SWEEP_LIMIT) -> ObligationSweep:
        """Take each obligation with a step due one step, in one transaction."""
        done = ObligationSweep()
        with self._write() as conn:
            rows = conn.execute(DUE_SQL, {"now": now_ms, "limit": limit}).fetchall()
            for obligation in map(_obligation, rows):
                ended = conn.execute(
                    f"SELECT state IN {ENDED_STATES} FROM swarm_messages WHERE msg_id = ?",
                    (obligation.msg_id,),
                ).fetchone()[0]
                if ended:
                    self._set_owed(conn, obligation.msg_id, Owed.CANCELLED, now_ms)
                    done.cancelled += 1
                elif obligation.state == Owed.OPEN:
                    self._remind(conn, obligation, now_ms)
                    done.targets.append(obligation.debtor)
                    done.reminded += 1
                else:
                    if self._tell_overdue(conn, obligation, now_ms):
                        done.targets.append(obligation.creditor)
                    done.overdue += 1
        return done

    def _set_owed(self, conn: Connection, msg_id: str, state: Owed, now_ms: int) -> None:
        stamp = {Owed.REMINDED: ", reminded_at = :now", Owed.OVERDUE: ", overdue_at = :now"}
        conn.execute(
            f"UPDATE swarm_obligations SET state = :state, updated_at = :now{stamp.get(state, '')}"
            " WHERE msg_id = :msg_id",
            {"state": str(state), "now": now_ms, "msg_id": msg_id},
        )

    def _remind(self, conn: Connection, obligation: Obligation, now_ms: int) -> None:
        within_s = obligation.within_ms / 1000
        payload = (
            f"You owe a reply to message {obligation.msg_id} from {obligation.creditor}"
            f" ({obligation.kind}), asked for within {within_s:g} s of its hand-off:"
            f' "{obligation.first_line}". Answer it with swarm_send and'
            f' reply_to="{obligation.msg_id}". This is the only reminder; next, its sender'
            " is told the reply is overdue."
        )
        self._notify(conn, obligation.debtor, REMINDER_KIND, obligation.msg_id, payload, now_ms)
        self._set_owed(conn, obligation.msg_id, Owed.REMINDED, now_ms)

    def _tell_overdue(self, conn: Connection, obligation: Obligation, now_ms: int) -> bool:
        """Mark it overdue and tell the creditor, if the creditor is a session (a sender
        named otherwise cannot be prompted: the row still says overdue)."""
        self._set_owed(conn, obligation.msg_id, Owed.OVERDUE, now_ms)
        if not SESSION_ID_RE.fullmatch(obligation.creditor):
            return False
        payload = (
            f"{obligation.debtor} has not replied to your message {obligation.msg_id}"
            f' ({obligation.kind}): "{obligation.first_line}", though reminded'
            f" {obligation.within_ms / 1000:g} s ago. The obligation stays listed as overdue"
            " until a reply comes."
        )
        self._notify(conn, obligation.creditor, OVERDUE_KIND, obligation.msg_id, payload, now_ms)
        return True

    def _notify(
        self, conn: Connection, to: str, kind: str, about: str, payload: str, now_ms: int
    ) -> None:
        self._insert(
            conn, msg_id=make_msg_id(now_ms), from_session=NOTICE_SENDER, to_session=to,
            channel=None, kind=kind, priority="normal", reply_to=about, payload=payload,
            now_ms=now_ms, expires_at=now_ms + self.notice_ttl_ms,
            sender=NOTICE_SENDER_CLAIM,
        )  # fmt: skip

    # -- listings ----------------------------------------------------------------------

    @reads
    def owed(self, session: str, limit: int = LIST_LIMIT) -> OwedList:
        """What ``session`` owes and is owed, outstanding only, oldest first."""

        def side(column: str) -> list[Obligation]:
            rows = self._conn.execute(
                f"{_OBLIGATION_SQL} WHERE o.{column} = ? AND o.state IN {_OUTSTANDING_SQL}"
                " ORDER BY o.created_at LIMIT ?",
                (session, limit),
            ).fetchall()
            return [_obligation(row) for row in rows]

        return OwedList(owes=side("debtor"), owed=side("creditor"))

    @reads
    def outstanding_obligations(self, limit: int = LIST_LIMIT) -> list[Obligation]:
        """Every outstanding obligation, oldest first: who owes whom, for operators."""
        rows = self._conn.execute(
            f"{_OBLIGATION_SQL} WHERE o.state IN {_OUTSTANDING_SQL} ORDER BY o.created_at LIMIT ?",
            (limit,),
        ).fetchall()
        return [_obligation(row) for row in rows]

    @reads
    def obligation(self, msg_id: str) -> Obligation | None:
        """The obligation of message ``msg_id``, in any state; None if it has none."""
        row = self._conn.execute(f"{_OBLIGATION_SQL} WHERE o.msg_id = ?", (msg_id,)).fetchone()
        return None if row is None else _obligation(row)
