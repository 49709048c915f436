"""Every query and state change on ``swarm_messages``.

The daemon, the CLIs and the operator TUI share this class, so each state
transition is written once.  Times are passed in as unix milliseconds: the
repository never reads a clock.  Writes run in short ``BEGIN IMMEDIATE``
transactions, which serialise with other writers on the same file (an
operator tool, a second connection) through SQLite's lock and busy timeout.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from pigeond.model import Hold, NewMessage, SenderClaim, StoredMessage
from pigeond.storage.accept_reads import AcceptReads, ask_accept_reads
from pigeond.storage.base import (
    COLUMNS,
    UNVERIFIED_SENDER,
    Connection,
    reads,
    row_to_message,
)
from pigeond.storage.brake_holds import BrakeHolds
from pigeond.storage.channels import Channels
from pigeond.storage.costs import Costs
from pigeond.storage.delivery import DEFAULT_NOTICE_TTL_MS, DeliveryTransitions
from pigeond.storage.drain_steps import DrainSteps
from pigeond.storage.intents import HandOffIntents
from pigeond.storage.looks import TranscriptLooks
from pigeond.storage.members import Members
from pigeond.storage.names import Names
from pigeond.storage.obligations import Obligations
from pigeond.storage.operator import OperatorActions
from pigeond.storage.pair_history import PairHistory
from pigeond.storage.permissions import Permissions
from pigeond.storage.policies import Policies
from pigeond.storage.queue_bytes import QueueBytes, payload_bytes
from pigeond.storage.receipts import Receipts
from pigeond.storage.retention import Retention
from pigeond.storage.routes import Routes
from pigeond.storage.search import Search
from pigeond.storage.sender_proofs import SenderProofs
from pigeond.storage.threads import Threads, count_send
from pigeond.storage.timed_work import TimedWork


@dataclass(frozen=True, slots=True)
class Accept:
    """One send to store: the message, when it came, when it expires (None: never), the
    most queued messages its target may hold (0: no cap; see :meth:`accept_many`), and
    the time its target has to reply after the hand-off (0: no reply expected)."""

    message: NewMessage
    now_ms: int
    expires_at: int | None = None
    queue_cap: int = 0
    reply_within_ms: int = 0
    # the name the send was addressed to (``to: "@reviewer"``), resolved to message.to_session
    to_name: str | None = None
    # why the message waits for its target's consent (its policy holds it), else None
    held: str | None = None
    # the thread the send path put it in (storage/threads.py); None only for callers that
    # keep no threads (its reply_to's thread is taken then, if any)
    thread_id: str | None = None
    # the conversation brake that holds it for a person (storage/brake_holds.py), else None
    brake_hold: Hold | None = None
    # what the send path knew of its sender (model.SenderProof); a channel's copies share it
    sender: SenderClaim = UNVERIFIED_SENDER
    # the most payload bytes the whole queue may hold with this send's copies (0: no bound;
    # pigeond/storage/queue_bytes.py)
    max_queued_bytes: int = 0


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """The limits the store applies to one send, in its own transaction (the flood guard's):
    the most queued messages its target, or each member of its channel, may hold, and the
    most payload bytes the whole queue may hold; 0: none."""

    per_target: int = 0
    total_bytes: int = 0


class AcceptOutcome(Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    TARGET_FULL = "target_full"  # the target already holds queue_cap queued messages
    NO_RECIPIENT = "no_recipient"  # a channel send no member would get a copy of
    QUEUE_FULL = "queue_full"  # its copies would take the queue past max_queued_bytes


# The most bytes of messages one inbox page holds unless the caller says otherwise.
DEFAULT_INBOX_MAX_BYTES = 1024 * 1024

# A session's hand-offs after a cursor, in hand-off order: a walk of idx_swarm_handoff
# that needs no sort, so rows come one at a time and the walk can stop early.
INBOX_PAGE_SQL = (
    f"SELECT {COLUMNS} FROM swarm_messages"
    " WHERE to_session = ? AND handoff_seq > ? AND state = 'handed_off'"
    " ORDER BY handoff_seq LIMIT ?"
)


@dataclass(frozen=True, slots=True)
class InboxPage:
    """One page of a session's inbox; ``has_more`` is true exactly when a message the
    page left out (for its count or its bytes) is waiting after the last one."""

    messages: list[StoredMessage]
    has_more: bool


def inbox_entry_bytes(message: StoredMessage) -> int:
    """What ``message`` adds to a ``GET /swarm/inbox`` answer: its inbox view as JSON in
    UTF-8, encoded as the API encodes answers.  Counting this rather than the payload
    alone bounds what the daemon builds and buffers even for payloads that JSON escaping
    inflates (a control character becomes six bytes)."""
    encoded = json.dumps(message.inbox_view(), ensure_ascii=False).encode("utf-8")
    return len(encoded)


def inbox_entry_bytes_at_most(message: StoredMessage) -> int:
    """An upper bound of :func:`inbox_entry_bytes` at a fraction of its cost: every
    character of a string at most 6 bytes (a ``\\u`` escape; UTF-8 takes at most 4), every
    other value at most 20 (a 64-bit integer, ``null``), each key with its quotes, colon
    and separator.  A page far from its byte budget never encodes a message to count it."""
    bound = 2
    for key, value in message.inbox_view().items():
        bound += len(key) + 6 + (6 * len(value) + 2 if isinstance(value, str) else 20)
    return bound


class SwarmRepository(
    TranscriptLooks,
    DrainSteps,
    DeliveryTransitions,
    HandOffIntents,
    OperatorActions,
    Retention,
    Receipts,
    Obligations,
    Names,
    Search,
    PairHistory,
    BrakeHolds,
    Policies,
    Channels,
    Routes,
    Members,
    Threads,
    Costs,
    Permissions,
    SenderProofs,
    TimedWork,
):
    def __init__(self, conn: Connection, *, notice_ttl_ms: int = DEFAULT_NOTICE_TTL_MS) -> None:
        super().__init__(conn)
        self.notice_ttl_ms = notice_ttl_ms

    # -- sending -----------------------------------------------------------

    def accept(
        self, message: NewMessage, now_ms: int, expires_at: int | None = None
    ) -> AcceptOutcome:
        """Store a new message as queued and due now, unless its msg_id exists.

        The same msg_id with the same content is a retried send (DUPLICATE,
        nothing written); with other content it is a CONFLICT.
        """
        return self.accept_many([Accept(message, now_ms, expires_at)])[0]

    def accept_many(self, accepts: Sequence[Accept]) -> list[AcceptOutcome]:
        """:meth:`accept` for each, in order, in one transaction (one fsync): a group
        commit.  Each outcome is what that accept alone would have given, a msg_id twice
        in the group included (the second sees the first); if the commit fails, nothing
        of the group is stored and StorageUnavailable is raised for all of it.

        An accept with a ``queue_cap`` whose target already holds that many queued
        messages is TARGET_FULL and stores nothing.  The count is taken in the same
        transaction as the insert, so concurrent sends can never push a target past its
        cap, and it comes after the msg_id check: a retried send is answered as before.
        So is ``max_queued_bytes`` (QUEUE_FULL; pigeond/storage/queue_bytes.py), and a
        channel message no member would get a copy of is NO_RECIPIENT; neither stores
        anything."""
        with self._write() as conn:
            # the accept sequence's number and the queue's bytes are asked with the first
            # accept's reads, and read with them (pigeond/storage/accept_reads.py)
            numbers = self._ask_sequence_value(conn, "accept")
            bounded = any(accept.max_queued_bytes > 0 for accept in accepts)
            queue = QueueBytes(conn, self.engine, bounded=bounded)
            first = [ask_accept_reads(conn, a.message, a.queue_cap) for a in accepts[:1]]
            last_seq = int(numbers.fetchone()[0])
            first_seq = last_seq + 1
            outcomes = []
            for i, accept in enumerate(accepts):
                # each after the inserts before it: a msg_id twice in a group sees itself
                reads = (
                    first[0] if i == 0 else ask_accept_reads(conn, accept.message, accept.queue_cap)
                )
                outcome, numbered = self._accept_one(conn, accept, reads, last_seq + 1, queue)
                last_seq += numbered
                outcomes.append(outcome)
            self._set_sequence(conn, "accept", last_seq)
            # wake the daemons that deliver to what was stored, at the commit
            self.engine.notify_accepted(conn, first_seq, last_seq)
            return outcomes

    def _accept_one(
        self, conn: Connection, accept: Accept, reads: AcceptReads, seq: int, queue: QueueBytes
    ) -> tuple[AcceptOutcome, int]:
        """Store ``accept`` numbered ``seq``, unless its msg_id is taken, its target full,
        no member of its channel would get it or the queue has no room for its bytes; a
        channel message is fanned out to its members, numbered after it.  Returns the
        outcome and how many accept numbers were used."""
        message = accept.message
        existing = reads.existing()
        if existing is not None:
            if message.same_content(existing):
                return AcceptOutcome.DUPLICATE, 0
            return AcceptOutcome.CONFLICT, 0
        cap = accept.queue_cap
        if reads.target_full():
            return AcceptOutcome.TARGET_FULL, 0
        from_name, target_name = reads.names()
        plan, copies = None, 1
        if message.channel is not None:
            plan = self._plan_fan_out(
                conn, message, queue_cap=cap, from_name=from_name, sender=accept.sender
            )
            copies = len(plan.copies)
            if copies == 0:
                return AcceptOutcome.NO_RECIPIENT, 0
        adding = payload_bytes(message.payload) * copies
        if not queue.fits(accept.max_queued_bytes, adding):
            return AcceptOutcome.QUEUE_FULL, 0
        self._insert(
            conn, msg_id=message.msg_id, from_session=message.from_session,
            to_session=message.to_session, channel=message.channel, kind=message.kind,
            priority=message.priority, reply_to=message.reply_to, payload=message.payload,
            now_ms=accept.now_ms, expires_at=accept.expires_at, seq=seq,
            from_name=from_name, to_name=accept.to_name or target_name,
            thread_id=accept.thread_id, sender=accept.sender, steer=message.steer,
        )  # fmt: skip
        numbered = 1
        if plan is not None:
            numbered += self._fan_out(
                conn, message, plan, now_ms=accept.now_ms, expires_at=accept.expires_at,
                first_seq=seq + 1, from_name=from_name, thread_id=accept.thread_id,
                sender=accept.sender,
            )  # fmt: skip
        queue.stored(adding)
        if accept.brake_hold is not None:  # a person decides first; consent at the release
            self._brake_hold_new(conn, message.msg_id, accept.brake_hold)
        elif accept.held is not None:
            self._hold_new(conn, message.msg_id, accept.held)
        if accept.thread_id is not None:
            count_send(conn, accept.thread_id, message.from_session, accept.now_ms,
                       held=accept.brake_hold is not None)  # fmt: skip
        if accept.reply_within_ms > 0 and message.to_session is not None:
            self._owe(conn, message, accept.reply_within_ms, accept.now_ms)
        if message.reply_to is not None:
            self._meet(conn, message, accept.now_ms)
        return AcceptOutcome.STORED, numbered

    # -- reading -----------------------------------------------------------

    @reads
    def get(self, msg_id: str) -> StoredMessage | None:
        return self._get(self._conn, msg_id)

    @reads
    def count_by_state(self) -> dict[str, int]:
        """Counts of deliveries by state: direct messages and channel members' copies
        (a channel message itself is not one: its copies are counted)."""
        rows = self._conn.execute(
            "SELECT state, COUNT(*) FROM swarm_messages WHERE to_session IS NOT NULL GROUP BY state"
        ).fetchall()
        return {str(state): int(n) for state, n in rows}

    @reads
    def count_open(self) -> dict[str, int]:
        """Counts of queued and failed direct messages only: the states that do not grow
        with history, so ``/health`` and the status line (every second) cost the same with
        a million delivered rows as with none (a search on idx_swarm_direct_state)."""
        rows = self._conn.execute(
            "SELECT state, COUNT(*) FROM swarm_messages"
            " WHERE to_session IS NOT NULL AND state IN ('queued', 'failed') GROUP BY state"
        ).fetchall()
        return {str(state): int(n) for state, n in rows}

    @reads
    def oldest_queued_at(self) -> int | None:
        """When the oldest queued direct message was accepted (unix ms); None if none is.
        Walks only queued rows (the partial idx_swarm_ready), not the history."""
        row = self._conn.execute(
            "SELECT MIN(created_at) FROM swarm_messages"
            " WHERE state = 'queued' AND to_session IS NOT NULL"
        ).fetchone()
        return None if row[0] is None else int(row[0])

    # -- the inbox ---------------------------------------------------------

    @reads
    def inbox_page(
        self,
        session: str,
        after_seq: int,
        limit: int,
        max_bytes: int = DEFAULT_INBOX_MAX_BYTES,
    ) -> InboxPage:
        """Messages handed off to ``session`` after hand-off number ``after_seq``: at most
        ``limit`` of them and at most ``max_bytes`` of :func:`inbox_entry_bytes`, except
        that the first message always comes, alone if it is larger, so a reader paging on
        always progresses.

        Rows are stepped one at a time in hand-off order (the idx_swarm_handoff index, no
        sort), so a large backlog is never read whole: the walk stops at the first message
        that does not fit (read only to say ``has_more``; sqlite3 steps one row ahead).
        Sizes are bounded cheaply (:func:`inbox_entry_bytes_at_most`) until the bounds no
        longer fit, and counted exactly from there: the same page, without encoding every
        message of a page far from its budget.
        """
        cursor = self._conn.execute(INBOX_PAGE_SQL, (session, after_seq, limit + 1))
        messages: list[StoredMessage] = []
        used = 0  # bytes of the messages taken: bounded while ``exact`` is false
        exact = False
        try:
            for row in cursor:
                if len(messages) == limit:
                    return InboxPage(messages=messages, has_more=True)
                message = row_to_message(row)
                if not exact:
                    bound = inbox_entry_bytes_at_most(message)
                    if used + bound <= max_bytes:
                        messages.append(message)
                        used += bound
                        continue
                    exact = True
                    used = sum(inbox_entry_bytes(m) for m in messages)
                size = inbox_entry_bytes(message)
                if messages and used + size > max_bytes:
                    return InboxPage(messages=messages, has_more=True)
                messages.append(message)
                used += size
        finally:
            cursor.close()  # ends the read at once, not when the cursor is collected
        return InboxPage(messages=messages, has_more=False)

    @reads
    def last_handoff_seq(self) -> int:
        row = self._conn.execute("SELECT value FROM swarm_sequences WHERE name = 'handoff'")
        return int(row.fetchone()[0])
