"""Channels (migration 14): who is a member, the fan-out of a channel message, its history.

A channel message is stored twice over, in the accept's one transaction: once as the
channel message itself (``to_session`` NULL, state ``fanned_out``: the channel's history,
which members who join later can read) and once per member but the sender, as a delivery
of its own (``to_session`` the member, ``channel`` kept, ``channel_msg_id`` naming the
channel message).  From there a delivery is an ordinary queued message: the arbiter hands
it to its member in that member's queue order, and retries, expiry, notices, receipts and
owed replies treat it as they treat a direct message.  Who is a member is read in the same
transaction as the insert, so a member who joins after the accept never gets the message
and one who left before it never does.

Each member's own consent applies to its copy, as it would to a direct message: ``hold``
holds it, ``refuse`` (unless the sender is on its allow-list) leaves that member out, and
a member whose queue is at the cap (``queue_cap``) is left out too, rather than refusing
the channel's other members their copy.  Who was left out, and why, is written on the
channel message (``last_error``), so a retried send answers what the first one did.  A
send that would reach no member at all (none but the sender, or every one left out) is not
stored: the accept answers ``NO_RECIPIENT`` (a 409), so a channel whose members are all full
cannot be made to keep its history growing.

Times come in as unix milliseconds: nothing here reads a clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Final

from pigeond.consent import InboundPolicy, Policy, Verdict, held_reason, parse_allow
from pigeond.ids import make_msg_id
from pigeond.model import NewMessage, SenderClaim, StoredMessage
from pigeond.storage.base import (
    COLUMNS,
    UNVERIFIED_SENDER,
    Connection,
    RepositoryBase,
    reads,
    row_to_message,
)

# The most members a channel may have unless the configuration says otherwise.
DEFAULT_MAX_CHANNEL_MEMBERS: Final = 32
# The most channels a listing shows (a swarm on one workstation has a handful).
CHANNEL_LIST_LIMIT: Final = 1000
# ``last_error`` of a channel message some members were left out of starts so.
SKIPPED_PREFIX: Final = "not delivered to: "

# The channel's history after an accept number, oldest first (idx_swarm_channel_history).
HISTORY_PAGE_SQL: Final = (
    f"SELECT {COLUMNS} FROM swarm_messages"
    " WHERE channel = ? AND to_session IS NULL AND accept_seq > ?"
    " ORDER BY accept_seq LIMIT ?"
)
# A channel's members but the sender, with the name and the policy each holds now.
_RECIPIENTS_SQL: Final = (
    "SELECT c.session, n.name, p.policy, p.allow FROM swarm_channel_members AS c"
    " LEFT JOIN swarm_names AS n ON n.session = c.session"
    " LEFT JOIN swarm_policies AS p ON p.session = c.session"
    " WHERE c.channel = ? AND c.session != ? ORDER BY c.joined_at, c.session"
)


class JoinOutcome(Enum):
    JOINED = "joined"
    ALREADY = "already"  # the session was a member; nothing written
    FULL = "full"  # the channel has its most members; nothing written


@dataclass(frozen=True, slots=True)
class ChannelMember:
    """One member, as ``GET /swarm/channels/<channel>`` and ``pigeon channel`` show it."""

    session: str
    name: str | None
    joined_at: int

    def view(self) -> dict[str, object]:
        return {"session": self.session, "name": self.name, "joined_at": self.joined_at}


@dataclass(frozen=True, slots=True)
class ChannelEntry:
    """One channel with members: how many, and when its last message was accepted."""

    channel: str
    members: int
    last_message_at: int | None

    def view(self) -> dict[str, object]:
        return {
            "channel": self.channel,
            "members": self.members,
            "last_message_at": self.last_message_at,
        }


@dataclass(frozen=True, slots=True)
class Skipped:
    """A member a channel message was not delivered to, and why."""

    session: str
    reason: str

    def view(self) -> dict[str, str]:
        return {"session": self.session, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class FanOut:
    """What one channel message became: its members' deliveries, and who was left out."""

    deliveries: list[StoredMessage]
    skipped: list[Skipped]


@dataclass(frozen=True, slots=True)
class _Copy:
    """One member's copy of a channel message, before it is stored."""

    member: str
    name: str | None
    held: str | None  # why its policy holds it, else None


@dataclass(frozen=True, slots=True)
class FanOutPlan:
    """Who gets a copy of a channel message and who is left out, decided before anything is
    written: a send that reaches no member is refused whole (a 409), and the bytes of every
    copy are counted against the queue's bound first (pigeond/storage/queue_bytes.py)."""

    copies: list[_Copy]
    skipped: list[Skipped]


@dataclass(frozen=True, slots=True)
class HistoryPage:
    messages: list[StoredMessage]
    has_more: bool


def _skipped_text(skipped: list[Skipped]) -> str | None:
    if not skipped:
        return None
    return SKIPPED_PREFIX + "; ".join(f"{s.session} ({s.reason})" for s in skipped)


def parse_skipped(last_error: str | None) -> list[Skipped]:
    """The members a channel message's ``last_error`` says it was not delivered to."""
    if last_error is None or not last_error.startswith(SKIPPED_PREFIX):
        return []
    found = []
    for part in last_error[len(SKIPPED_PREFIX) :].split("; "):
        session, _, reason = part.partition(" (")
        found.append(Skipped(session, reason.removesuffix(")")))
    return found


def _member_policy(session: str, policy: object, allow: object) -> InboundPolicy | None:
    if policy is None:
        return None
    return InboundPolicy(session, Policy(str(policy)), parse_allow(json.loads(str(allow))))


def _unproven(
    rule: InboundPolicy, message: NewMessage, from_name: str | None, sender: SenderClaim
) -> str | None:
    """The sender, when ``rule``'s allow-list names it but its proof did not admit it."""
    listed = rule.allows(message.from_session, from_name)
    return message.from_session if listed and not sender.may_be_allowed else None


class Channels(RepositoryBase):
    # -- membership ------------------------------------------------------------------

    def join_channel(
        self, channel: str, session: str, now_ms: int, max_members: int
    ) -> JoinOutcome:
        """Make ``session`` a member of ``channel`` unless it is one, or the channel
        already has ``max_members``; counted in the insert's transaction, so two joins
        racing for the last place cannot both have it."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(CASE WHEN session = ? THEN 1 ELSE 0 END), 0)"
                " FROM swarm_channel_members"
                " WHERE channel = ?",
                (session, channel),
            ).fetchone()
            members, already = int(row[0]), int(row[1])
            if already:
                return JoinOutcome.ALREADY
            if members >= max_members:
                return JoinOutcome.FULL
            conn.execute(
                "INSERT INTO swarm_channel_members (channel, session, joined_at) VALUES (?, ?, ?)",
                (channel, session, now_ms),
            )
            return JoinOutcome.JOINED

    def leave_channel(self, channel: str, session: str) -> bool:
        """``session`` is no longer a member of ``channel`` (False: it was not one).  Its
        deliveries already stored stay: they were accepted while it was a member."""
        with self._write() as conn:
            return (
                conn.execute(
                    "DELETE FROM swarm_channel_members WHERE channel = ? AND session = ?",
                    (channel, session),
                ).rowcount
                > 0
            )

    @reads
    def channel_members(self, channel: str) -> list[ChannelMember]:
        """``channel``'s members, in the order they joined."""
        rows = self._conn.execute(
            "SELECT c.session, n.name, c.joined_at FROM swarm_channel_members AS c"
            " LEFT JOIN swarm_names AS n ON n.session = c.session"
            " WHERE c.channel = ? ORDER BY c.joined_at, c.session",
            (channel,),
        ).fetchall()
        return [ChannelMember(str(s), None if n is None else str(n), int(j)) for s, n, j in rows]

    @reads
    def channels(self) -> list[ChannelEntry]:
        """Every channel that has members, by name."""
        rows = self._conn.execute(
            "SELECT c.channel, COUNT(*),"
            " (SELECT MAX(m.accept_seq) FROM swarm_messages AS m"
            "  WHERE m.channel = c.channel AND m.to_session IS NULL)"
            " FROM swarm_channel_members AS c GROUP BY c.channel ORDER BY c.channel LIMIT ?",
            (CHANNEL_LIST_LIMIT,),
        ).fetchall()
        entries = []
        for channel, members, last_seq in rows:
            last_at = None
            if last_seq is not None:
                found = self._conn.execute(
                    "SELECT created_at FROM swarm_messages WHERE accept_seq = ?", (last_seq,)
                ).fetchone()
                last_at = None if found is None else int(found[0])
            entries.append(ChannelEntry(str(channel), int(members), last_at))
        return entries

    @reads
    def channels_of(self, session: str) -> list[str]:
        """The channels ``session`` is a member of, by name."""
        rows = self._conn.execute(
            "SELECT channel FROM swarm_channel_members WHERE session = ? ORDER BY channel",
            (session,),
        ).fetchall()
        return [str(r[0]) for r in rows]

    # -- history and deliveries ------------------------------------------------------

    @reads
    def channel_history(self, channel: str, after_seq: int, limit: int) -> HistoryPage:
        """The channel's messages accepted after accept number ``after_seq``, oldest
        first, at most ``limit``: what a member who joined late can still read."""
        rows = self._conn.execute(HISTORY_PAGE_SQL, (channel, after_seq, limit + 1)).fetchall()
        messages = [row_to_message(r) for r in rows[:limit]]
        return HistoryPage(messages, has_more=len(rows) > limit)

    @reads
    def channel_history_page(
        self, channel: str, after_seq: int, limit: int, max_bytes: int
    ) -> HistoryPage:
        """:meth:`channel_history` bounded in bytes too, as an inbox page is (``GET
        /swarm/channel/<channel>``): at most ``max_bytes`` of messages as the API encodes
        them, except that the first always comes, alone if larger, so a reader progresses.
        Rows are stepped one at a time, so a long history is never read whole."""
        cursor = self._conn.execute(HISTORY_PAGE_SQL, (channel, after_seq, limit + 1))
        messages: list[StoredMessage] = []
        used = 0
        try:
            for row in cursor:
                if len(messages) == limit:
                    return HistoryPage(messages, has_more=True)
                message = row_to_message(row)
                size = len(json.dumps(message.inbox_view(), ensure_ascii=False).encode("utf-8"))
                if messages and used + size > max_bytes:
                    return HistoryPage(messages, has_more=True)
                messages.append(message)
                used += size
        finally:
            cursor.close()  # ends the read at once, not when the cursor is collected
        return HistoryPage(messages, has_more=False)

    @reads
    def last_accept_seq(self) -> int:
        """The last accept number given out: a history cursor past it is no cursor of ours."""
        row = self._conn.execute("SELECT value FROM swarm_sequences WHERE name = 'accept'")
        return int(row.fetchone()[0])

    @reads
    def fan_out_of(self, channel_msg_id: str) -> FanOut:
        """The deliveries a channel message was fanned out into, and who was left out."""
        return self._fan_out_of(self._conn, channel_msg_id)

    @reads
    def copies_of(self, channel_msg_id: str) -> int:
        """How many member copies a channel message was stored as (a search of
        idx_swarm_fanout): what its sender is charged by the flood guard."""
        row = self._conn.execute(
            "SELECT COUNT(*) FROM swarm_messages WHERE channel_msg_id = ?", (channel_msg_id,)
        ).fetchone()
        return int(row[0])

    def _fan_out_of(self, conn: Connection, channel_msg_id: str) -> FanOut:
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM swarm_messages WHERE channel_msg_id = ? ORDER BY accept_seq",
            (channel_msg_id,),
        ).fetchall()
        parent = conn.execute(
            "SELECT last_error FROM swarm_messages WHERE msg_id = ?", (channel_msg_id,)
        ).fetchone()
        skipped = parse_skipped(None if parent is None else parent[0])
        return FanOut([row_to_message(r) for r in rows], skipped)

    def _plan_fan_out(
        self,
        conn: Connection,
        message: NewMessage,
        *,
        queue_cap: int,
        from_name: str | None,
        sender: SenderClaim = UNVERIFIED_SENDER,
    ) -> FanOutPlan:
        """Inside the accept, before anything is written: which members get a copy of
        ``message`` (and whether their policy holds it) and who is left out, and why.  A
        member's allow-list admits the sender only as its ``sender`` proof may
        (consent.InboundPolicy.verdict)."""
        assert message.channel is not None
        recipients = conn.execute(_RECIPIENTS_SQL, (message.channel, message.from_session))
        plan = FanOutPlan([], [])
        for session, name, policy, allow in recipients.fetchall():
            member = str(session)
            rule = _member_policy(member, policy, allow)
            verdict = Verdict.DELIVER
            if rule is not None:
                verdict = rule.verdict(message.from_session, from_name, sender.may_be_allowed)
            if verdict is Verdict.REFUSE:
                plan.skipped.append(Skipped(member, "its inbound policy is refuse"))
                continue
            if queue_cap > 0 and self._queued_for(conn, member, queue_cap) >= queue_cap:
                plan.skipped.append(Skipped(member, f"its queue holds {queue_cap} messages"))
                continue
            held = None
            if verdict is Verdict.HOLD:
                assert rule is not None
                held = held_reason(member, rule.policy, _unproven(rule, message, from_name, sender))
            plan.copies.append(_Copy(member, None if name is None else str(name), held))
        return plan

    def _fan_out(
        self,
        conn: Connection,
        message: NewMessage,
        plan: FanOutPlan,
        *,
        now_ms: int,
        expires_at: int | None,
        first_seq: int,
        from_name: str | None,
        thread_id: str | None = None,
        sender: SenderClaim = UNVERIFIED_SENDER,
    ) -> int:
        """Inside the accept: store ``message`` to the members ``plan`` names as deliveries
        numbered from ``first_seq``, and note who was left out on the channel message
        (already inserted).  Returns how many accept numbers it used.  Each copy shares
        the channel message's ``sender`` proof."""
        assert message.channel is not None
        seq = first_seq
        for copy in plan.copies:
            msg_id = make_msg_id(now_ms)
            self._insert(
                conn, msg_id=msg_id, from_session=message.from_session, to_session=copy.member,
                channel=message.channel, kind=message.kind, priority=message.priority,
                reply_to=message.reply_to, payload=message.payload, now_ms=now_ms,
                expires_at=expires_at, seq=seq, from_name=from_name, to_name=copy.name,
                channel_msg_id=message.msg_id, thread_id=thread_id, sender=sender,
                steer=message.steer,
            )  # fmt: skip
            if copy.held is not None:
                conn.execute(
                    "UPDATE swarm_messages SET next_retry_at = NULL, last_error = ?,"
                    " hold_kind = 'consent' WHERE msg_id = ?",
                    (copy.held, msg_id),
                )
            seq += 1
        conn.execute(
            "UPDATE swarm_messages SET state = 'fanned_out', next_retry_at = NULL,"
            " last_error = ? WHERE msg_id = ?",
            (_skipped_text(plan.skipped), message.msg_id),
        )
        return seq - first_seq
