"""Messages a conversation brake holds for a person, as SQL (migration 18).

A brake-held message is a queued row with no ``next_retry_at`` (never due: the arbiter's
queries step over it, as over a consent hold) and ``hold_kind = 'brake'``, with the
brake's name and reason.  Unlike a consent hold it waits for a person alone: no policy
change releases it (storage/policies.py touches ``hold_kind = 'consent'`` rows only), it
never expires (``expires_at`` is NULL while held; its time to live is kept in
``hold_ttl_ms`` and given anew at its release), it is not counted in its target's queue
cap (storage/base.py) nor as a hop of its thread, it is never pruned (it is queued), and
its sender is told nothing until a person drops it.

A person then either releases it (:meth:`BrakeHolds.release_brake_hold`: due now, in its
old order; with ``reset`` the brake's counter starts over, with ``raise`` the thread's
limit grows, with ``once`` nothing else changes) or drops it
(:meth:`BrakeHolds.drop_brake_hold`: cancelled, and the sender gets pigeond's failure
notice, "dropped by a person").  Each is one transaction, conditional on the row still
being held, so two people deciding at once decide once.  Released, the message meets its
target's consent as a new send would: held again if the target's policy holds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum

from pigeond.model import HOLD_BRAKE, Hold, first_line
from pigeond.storage.base import Connection, reads
from pigeond.storage.costs import raise_budget
from pigeond.storage.policies import Policies

# What dropping a message tells its sender (and leaves in its last_error).
DROPPED_BY_A_PERSON = "dropped by a person"
# How many held messages a listing gives unless told.
HELD_LIMIT = 200
# How much of a held message's payload its listing quotes.
PREVIEW_CHARS = 120

# The brakes whose limit a release can raise, per thread (the hop brake; the budget brake
# adds its own).  Raising any other is refused (the route's 400).
RAISABLE_BRAKES = ("hops", "budget")

_HELD = "state = 'queued' AND hold_kind = 'brake' AND next_retry_at IS NULL"
_HELD_COLUMNS = (
    "msg_id, from_session, to_session, channel, thread_id, hold_brake, hold_reason,"
    " created_at, kind, from_name, to_name, payload"
)


class ReleaseMode(StrEnum):
    """What a release does beside delivering the message."""

    RESET = "reset"  # the brake's counter starts over (hops 0, the pair's window, the budget)
    RAISE = "raise"  # the thread's limit grows by N (the hop limit; the token budget)
    ONCE = "once"  # nothing else: the next message past the limit is held again


class HoldOutcome(Enum):
    DONE = "done"
    UNKNOWN = "unknown message"  # no such message (never, or pruned)
    NOT_HELD = "not held by a brake"  # delivered, ended, held by consent, decided already
    NOT_RAISABLE = "its brake has no limit to raise"


@dataclass(frozen=True, slots=True)
class HeldMessage:
    """One message a brake holds, as ``GET /swarm/held`` and ``pigeon held`` list it."""

    msg_id: str
    from_session: str
    to_session: str | None
    channel: str | None
    thread_id: str | None
    brake: str
    reason: str
    created_at: int
    kind: str
    from_name: str | None
    to_name: str | None
    preview: str  # the payload's first line, cut to PREVIEW_CHARS

    def view(self) -> dict[str, object]:
        return {
            "msg_id": self.msg_id,
            "from": self.from_session,
            "to": self.to_session,
            "channel": self.channel,
            "thread": self.thread_id,
            "brake": self.brake,
            "reason": self.reason,
            "created_at": self.created_at,
            "kind": self.kind,
            "from_name": self.from_name,
            "to_name": self.to_name,
            "preview": self.preview,
        }


@dataclass(frozen=True, slots=True)
class Release:
    """What a release did: its outcome, and the target to kick when it delivered."""

    outcome: HoldOutcome
    target: str | None = None


def pair_scope(a: str, b: str) -> str:
    """The reset scope of the pair brakes between sessions ``a`` and ``b``, either way."""
    low, high = sorted((a, b))
    return f"pair:{low}:{high}"


def budget_scope(thread_id: str) -> str:
    """The reset scope of a thread's budget (its cost counts from there)."""
    return f"budget:{thread_id}"


def _row_to_held(row: Sequence[object]) -> HeldMessage:
    (msg_id, sender, target, channel, thread_id, brake, reason, created_at, kind,
     from_name, to_name, payload) = row  # fmt: skip
    return HeldMessage(
        msg_id=str(msg_id),
        from_session=str(sender),
        to_session=None if target is None else str(target),
        channel=None if channel is None else str(channel),
        thread_id=None if thread_id is None else str(thread_id),
        brake=str(brake),
        reason=str(reason),
        created_at=int(str(created_at)),
        kind=str(kind),
        from_name=None if from_name is None else str(from_name),
        to_name=None if to_name is None else str(to_name),
        preview=first_line(str(payload), PREVIEW_CHARS),
    )


class BrakeHolds(Policies):
    """Brake holds; a Policies, since a released message meets its target's consent."""

    notice_ttl_ms: int  # the notices' time to live (the repository's, set by a reload)

    @reads
    def held_messages(
        self, limit: int = HELD_LIMIT, thread_id: str | None = None
    ) -> list[HeldMessage]:
        """Messages a brake holds now, oldest first (accept order); of one thread when
        ``thread_id`` is given.  A search of the partial idx_swarm_brake_held."""
        rows = self._conn.execute(
            f"SELECT {_HELD_COLUMNS} FROM swarm_messages WHERE {_HELD}"
            " AND (CAST(:thread AS TEXT) IS NULL OR thread_id = :thread)"
            " ORDER BY accept_seq LIMIT :limit",
            {"thread": thread_id, "limit": limit},
        ).fetchall()
        return [_row_to_held(r) for r in rows]

    @reads
    def brake_held_count(self) -> int:
        """How many messages wait for a person now (a count of idx_swarm_brake_held)."""
        row = self._conn.execute(f"SELECT COUNT(*) FROM swarm_messages WHERE {_HELD}")
        return int(row.fetchone()[0])

    @reads
    def brake_reset_at(self, scope: str) -> int | None:
        """When a person last reset the brake counter of ``scope`` (:func:`pair_scope`,
        :func:`budget_scope`); None if never."""
        row = self._conn.execute(
            "SELECT reset_at FROM swarm_brake_resets WHERE scope = ?", (scope,)
        ).fetchone()
        return None if row is None else int(row[0])

    def set_brake_reset(self, scope: str, at_ms: int) -> None:
        """Record that the brake counter of ``scope`` starts over at ``at_ms``."""
        with self._write() as conn:
            self._set_reset(conn, scope, at_ms)

    def release_brake_hold(self, msg_id: str, mode: ReleaseMode, by: int, now_ms: int) -> Release:
        """Deliver the brake-held ``msg_id`` (due now, in its old order, with its whole time
        to live again) and, by ``mode``: start its brake's counter over (``reset``), raise
        its thread's limit by ``by`` (``raise``: the hop limit becomes the thread's hops, or
        its own limit if higher, plus ``by``), or nothing (``once``).  A brake without a
        limit to raise is NOT_RAISABLE and nothing changes."""
        with self._write() as conn:
            message = self._get(conn, msg_id)
            if message is None:
                return Release(HoldOutcome.UNKNOWN)
            if not message.brake_held or message.next_retry_at is not None:
                return Release(HoldOutcome.NOT_HELD)
            brake = message.hold_brake or ""
            if mode is ReleaseMode.RAISE and brake not in RAISABLE_BRAKES:
                return Release(HoldOutcome.NOT_RAISABLE)
            conn.execute(
                "UPDATE swarm_messages SET hold_kind = NULL, next_retry_at = :now,"
                " last_error = NULL, updated_at = :now,"
                " expires_at = CASE WHEN hold_ttl_ms IS NULL THEN NULL"
                " ELSE :now + hold_ttl_ms END"
                f" WHERE msg_id = :msg_id AND {_HELD}",
                {"now": now_ms, "msg_id": msg_id},
            )
            if mode is ReleaseMode.RESET:
                self._reset_brake(conn, brake, message.from_session, message.to_session,
                                  message.thread_id, now_ms)  # fmt: skip
            elif mode is ReleaseMode.RAISE and brake == "budget" and message.thread_id:
                since = self.brake_reset_at(budget_scope(message.thread_id)) or 0
                raise_budget(conn, message.thread_id, by, since)  # N more tokens from now
            elif mode is ReleaseMode.RAISE and message.thread_id is not None:
                conn.execute(
                    "UPDATE swarm_threads SET hop_limit = (CASE WHEN hop_limit IS NOT NULL"
                    " AND hop_limit > hops THEN hop_limit ELSE hops END) + ?"
                    " WHERE thread_id = ?",
                    (by, message.thread_id),
                )
            if message.to_session is not None:
                self._consent_again(conn, message.to_session, now_ms)
            return Release(HoldOutcome.DONE, message.to_session)

    def drop_brake_hold(self, msg_id: str, now_ms: int) -> HoldOutcome:
        """Cancel the brake-held ``msg_id`` for good, and queue its sender's failure notice
        ("dropped by a person"), in one transaction."""
        with self._write() as conn:
            message = self._get(conn, msg_id)
            if message is None:
                return HoldOutcome.UNKNOWN
            if not message.brake_held or message.next_retry_at is not None:
                return HoldOutcome.NOT_HELD
            conn.execute(
                "UPDATE swarm_messages SET state = 'cancelled', hold_kind = NULL,"
                f" last_error = ?, updated_at = ? WHERE msg_id = ? AND {_HELD}",
                (DROPPED_BY_A_PERSON, now_ms, msg_id),
            )
            ended = self._get(conn, msg_id)
            assert ended is not None
            self._queue_notice(conn, ended, DROPPED_BY_A_PERSON, now_ms, self.notice_ttl_ms)
            return HoldOutcome.DONE

    # -- inside other writes ---------------------------------------------------------

    def _brake_hold_new(self, conn: Connection, msg_id: str, hold: Hold) -> None:
        """Inside the accept: the message just stored (and, for a channel message, each of
        its members' copies) waits for a person.  Its time to live is kept for later."""
        conn.execute(
            "UPDATE swarm_messages SET hold_kind = ?, hold_brake = ?, hold_reason = ?,"
            " hold_ttl_ms = CASE WHEN expires_at IS NULL THEN NULL"
            " ELSE expires_at - created_at END, expires_at = NULL, next_retry_at = NULL,"
            " last_error = ? WHERE (msg_id = ? OR channel_msg_id = ?) AND state = 'queued'",
            (HOLD_BRAKE, hold.brake, hold.reason, hold.reason, msg_id, msg_id),
        )

    def _reset_brake(
        self,
        conn: Connection,
        brake: str,
        sender: str,
        target: str | None,
        thread_id: str | None,
        now_ms: int,
    ) -> None:
        """Start ``brake``'s counter over for the message's thread or pair."""
        if brake == "hops" and thread_id is not None:
            conn.execute(
                "UPDATE swarm_threads SET hops = 0, reset_at = ? WHERE thread_id = ?",
                (now_ms, thread_id),
            )
        elif brake in ("pair_rate", "repeat") and target is not None:
            self._set_reset(conn, pair_scope(sender, target), now_ms)
        elif brake == "budget" and thread_id is not None:
            self._set_reset(conn, budget_scope(thread_id), now_ms)

    @staticmethod
    def _set_reset(conn: Connection, scope: str, at_ms: int) -> None:
        conn.execute(
            "INSERT INTO swarm_brake_resets (scope, reset_at) VALUES (?, ?)"
            " ON CONFLICT (scope) DO UPDATE SET reset_at = excluded.reset_at",
            (scope, at_ms),
        )
