"""Threads as SQL: which thread a message is in, and each thread's counters (migration 17).

Every send is accepted into a thread the send path chose (pigeond/api/routes.py: the
send's ``thread``, else its ``reply_to``'s, else a new one); the accept, in its own
transaction, keeps the thread's row: ``hops`` counts the sends from agents (a sender that
is a session id) since ``reset_at``, and a send from anyone else (a person's shell, a
script) resets it; a send a brake holds counts nowhere but ``messages``.  Each recorded
hand-off adds one ``turn`` to each thread of its batch.  pigeond's own notices carry
their message's thread (storage/base.py ``_insert``) and count nowhere.

A person's own prompt in a session of the thread also resets it, lazily: only when the
hop brake would hold a send does it ask the transcripts (pigeond/brakes/hops.py), and
:meth:`Threads.reset_thread` records what it found.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pigeond.model import SESSION_ID_RE
from pigeond.storage.base import Connection, RepositoryBase, reads
from pigeond.storage.engines import Engine, json_texts

THREAD_COLUMNS = (
    "t.thread_id, t.created_at, t.updated_at, t.hops, t.turns, t.messages, t.reset_at,"
    " t.hop_limit, t.token_budget, t.cost_budget,"
    " (SELECT COUNT(*) FROM swarm_messages h"
    "  WHERE h.thread_id = t.thread_id AND h.hold_kind = 'brake'"
    "  AND h.next_retry_at IS NULL) AS held"
)
# How many threads a listing gives unless told.
THREADS_LIMIT = 100
# How many of a thread's latest messages are read for its sessions (a thread's sessions
# are the few that talk in it; a long thread's early ones are of no interest to a reset).
THREAD_SESSIONS_SCAN = 500

# One accepted send, in the accept's transaction: the thread's row made or brought up to
# date.  :counted is 1 for a send that counts as a hop, :person 1 for one that resets.
_COUNT_SEND_SQL = (
    "INSERT INTO swarm_threads (thread_id, created_at, updated_at, hops, turns, messages,"
    " reset_at) VALUES (:thread, :now, :now, :counted, 0, 1, :now)"
    " ON CONFLICT (thread_id) DO UPDATE SET updated_at = :now,"
    " messages = swarm_threads.messages + 1,"
    " hops = CASE WHEN :person = 1 THEN 0 ELSE swarm_threads.hops + :counted END,"
    " reset_at = CASE WHEN :person = 1 THEN :now ELSE swarm_threads.reset_at END"
)


# The resets of the budgets of the threads in ``?`` (a JSON list of scopes).
_FORGET_RESETS_SQL = json_texts("?").map(
    lambda scopes: f"DELETE FROM swarm_brake_resets WHERE scope IN (SELECT value FROM {scopes})"
)
# One turn for each thread of the messages in ``?`` (a JSON list of msg_ids).
_COUNT_TURNS_SQL = json_texts("?").map(
    lambda ids: (
        "UPDATE swarm_threads SET turns = turns + 1 WHERE thread_id IN ("
        " SELECT DISTINCT thread_id FROM swarm_messages"
        f" WHERE msg_id IN (SELECT value FROM {ids}) AND thread_id IS NOT NULL)"
    )
)


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """One thread's row, with how many of its messages a brake holds now."""

    thread_id: str
    created_at: int
    updated_at: int
    hops: int  # sends from agents since reset_at (the hop brake's counter)
    turns: int  # hand-offs recorded (one per prompt) of its messages
    messages: int  # sends accepted into it, held ones included
    reset_at: int  # when its hops last started over (its start, a person, a release)
    hop_limit: int | None  # this thread's own hop limit (None: max_hops_per_thread)
    token_budget: int | None  # its own token budget (None: thread_budget_tokens)
    cost_budget: float | None  # its own cost budget (None: thread_budget_cost)
    held: int  # its messages a brake holds for a person now

    def hop_limit_or(self, default: int) -> int:
        """The hop limit in force: this thread's own, else ``default`` (the option)."""
        return default if self.hop_limit is None else self.hop_limit

    def view(self) -> dict[str, object]:
        """The fields ``GET /swarm/threads`` and ``pigeon threads --json`` show."""
        return {
            "thread": self.thread_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "hops": self.hops,
            "turns": self.turns,
            "messages": self.messages,
            "reset_at": self.reset_at,
            "hop_limit": self.hop_limit,
            "token_budget": self.token_budget,
            "cost_budget": self.cost_budget,
            "held": self.held,
        }


def _row_to_thread(row: Sequence[object]) -> ThreadInfo:
    (thread_id, created, updated, hops, turns, messages, reset_at, hop_limit,
     token_budget, cost_budget, held) = row  # fmt: skip
    return ThreadInfo(
        thread_id=str(thread_id),
        created_at=int(str(created)),
        updated_at=int(str(updated)),
        hops=int(str(hops)),
        turns=int(str(turns)),
        messages=int(str(messages)),
        reset_at=int(str(reset_at)),
        hop_limit=None if hop_limit is None else int(str(hop_limit)),
        token_budget=None if token_budget is None else int(str(token_budget)),
        cost_budget=None if cost_budget is None else float(str(cost_budget)),
        held=int(str(held)),
    )


class Threads(RepositoryBase):
    @reads
    def thread_of(self, msg_id: str) -> str | None:
        """The thread of message ``msg_id``; None when it is unknown (or pruned) or was
        stored before threads."""
        row = self._conn.execute(
            "SELECT thread_id FROM swarm_messages WHERE msg_id = ?", (msg_id,)
        ).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    @reads
    def thread(self, thread_id: str) -> ThreadInfo | None:
        """One thread's row; None when no send was accepted into it."""
        row = self._conn.execute(
            f"SELECT {THREAD_COLUMNS} FROM swarm_threads t WHERE t.thread_id = ?", (thread_id,)
        ).fetchone()
        return None if row is None else _row_to_thread(row)

    @reads
    def threads(self, limit: int = THREADS_LIMIT) -> list[ThreadInfo]:
        """The threads, the one with the latest send first (idx_swarm_threads_updated)."""
        rows = self._conn.execute(
            f"SELECT {THREAD_COLUMNS} FROM swarm_threads t"
            " ORDER BY t.updated_at DESC, t.thread_id LIMIT ?",
            (limit,),
        ).fetchall()
        return [_row_to_thread(r) for r in rows]

    @reads
    def thread_sessions(self, thread_id: str) -> list[str]:
        """The sessions (ids, not people's shells) that sent or were sent the thread's latest
        messages, in order of appearance from the newest: whose transcripts a person's
        prompt may be in."""
        rows = self._conn.execute(
            "SELECT from_session, to_session FROM swarm_messages WHERE thread_id = ?"
            " ORDER BY accept_seq DESC LIMIT ?",
            (thread_id, THREAD_SESSIONS_SCAN),
        ).fetchall()
        sessions: list[str] = []
        for pair in rows:
            for session in (str(s) for s in pair if s is not None):
                if SESSION_ID_RE.fullmatch(session) and session not in sessions:
                    sessions.append(session)
        return sessions

    def reset_thread(self, thread_id: str, at_ms: int) -> bool:
        """A person prompted a session of the thread at ``at_ms``: its hops start over from
        then, unless it was reset at or after that already.  Returns whether it was."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE swarm_threads SET hops = 0, reset_at = ?"
                " WHERE thread_id = ? AND reset_at < ?",
                (at_ms, thread_id, at_ms),
            )
            return cursor.rowcount == 1

    def prune_threads(self, cutoff: int, limit: int) -> int:
        """Forget at most ``limit`` threads with no send since ``cutoff`` and no message left
        (pruning took them: storage/retention.py), and their budget's reset; how many."""
        with self._write() as conn:
            rows = conn.execute(
                "DELETE FROM swarm_threads WHERE thread_id IN ("
                " SELECT t.thread_id FROM swarm_threads t WHERE t.updated_at < :cutoff"
                " AND NOT EXISTS (SELECT 1 FROM swarm_messages m"
                "  WHERE m.thread_id = t.thread_id)"
                " ORDER BY t.updated_at LIMIT :limit) RETURNING thread_id",
                {"cutoff": cutoff, "limit": limit},
            ).fetchall()
            scopes = [f"budget:{r[0]}" for r in rows]
            if scopes:
                conn.execute(self.engine.sql(_FORGET_RESETS_SQL), (json.dumps(scopes),))
            return len(rows)


def count_send(conn: Connection, thread_id: str, sender: str, now_ms: int, *, held: bool) -> None:
    """Inside the accept: the thread of a send just stored.  An agent's send counts one
    hop, a person's resets the count; a held one counts as neither."""
    person = not held and not SESSION_ID_RE.fullmatch(sender)
    counted = not held and not person
    conn.execute(
        _COUNT_SEND_SQL,
        {"thread": thread_id, "now": now_ms, "counted": int(counted), "person": int(person)},
    )


def count_turns(conn: Connection, engine: Engine, msg_ids: Sequence[str]) -> None:
    """Inside a hand-off's record: one turn for each thread of the batch ``msg_ids``."""
    if not msg_ids:
        return
    conn.execute(engine.sql(_COUNT_TURNS_SQL), (json.dumps(list(msg_ids)),))
