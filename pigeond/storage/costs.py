"""Turn costs: the turns hand-offs caused, and their sums per thread and session.

The verifier reads a target's transcript after a hand-off; once the turn that consumed it
has ended, it records the turn here with what it used (:mod:`pigeond.costs`).  What is
recorded is what happened, once: a turn read again (a repeated look, a restart) is the same
``(session, turn_key)`` and adds nothing; a hand-off is linked to one turn at most; and only
a hand-off that was seen in its target's transcript and is still handed off is linked
(a requeued or never-seen hand-off leaves no turn).  A thread's sums count each turn once
however many of its messages the turn consumed; a turn that consumed messages of two
threads counts in both.  Times come in as unix milliseconds; nothing here reads a clock.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from typing import Any

from pigeond.costs import NO_COST, CostTotals, EndedTurn
from pigeond.ids import base36
from pigeond.storage.base import Connection, RepositoryBase, reads
from pigeond.storage.write_marks import shares_commit

# The sums of a group of swarm_turns rows, in CostTotals' order.
_SUMS_SQL = (
    "COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),"
    " COALESCE(SUM(reasoning_tokens), 0), COALESCE(SUM(cache_read_tokens), 0),"
    " COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(cost), 0),"
    " COALESCE(SUM(CASE WHEN cost IS NULL THEN 1 ELSE 0 END), 0)"
)
# Each (thread, turn) once: a turn that consumed three messages of a thread is one turn of it.
_THREAD_TURNS_SQL = (
    "SELECT DISTINCT m.thread_id, tm.turn_id FROM swarm_turn_messages AS tm"
    " JOIN swarm_messages AS m ON m.msg_id = tm.msg_id"
)
# A thread's turns recorded after a time (its budget's base).
_SINCE_SQL = (
    f"SELECT {_SUMS_SQL} FROM ({_THREAD_TURNS_SQL} WHERE m.thread_id = ?) AS x"
    " JOIN swarm_turns AS t ON t.turn_id = x.turn_id WHERE t.recorded_at > ?"
)
# Retention (storage/retention.py): the oldest turns recorded before the cutoff, a batch at
# a time beside the messages' own batch, their links first.
_OLDEST_TURNS_SQL = (
    "SELECT turn_id FROM swarm_turns WHERE recorded_at < :cutoff ORDER BY recorded_at LIMIT :limit"
)
PRUNE_TURNS_SQL = (
    f"DELETE FROM swarm_turn_messages WHERE turn_id IN ({_OLDEST_TURNS_SQL})",
    f"DELETE FROM swarm_turns WHERE turn_id IN ({_OLDEST_TURNS_SQL})",
)
# How many ids one IN (...) list takes (SQLite's bound on variables is far above).
_CHUNK = 500
LIST_LIMIT = 1000


def _totals(row: Sequence[Any]) -> CostTotals:
    turns, inp, out, reasoning, cache_read, cache_write, cost, unknown = row
    return CostTotals(
        int(turns), int(inp), int(out), int(reasoning), int(cache_read), int(cache_write),
        float(cost), int(unknown),
    )  # fmt: skip


def _chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), _CHUNK):
        yield unique[start : start + _CHUNK]


def make_turn_id(now_ms: int) -> str:
    return f"turn_{base36(now_ms)}_{secrets.token_hex(4)}"


class Costs(RepositoryBase):
    @shares_commit
    def record_turns(
        self, session: str, turns: Sequence[EndedTurn], now_ms: int
    ) -> list[EndedTurn]:
        """Record ``session``'s ended ``turns`` and link each to the msg_ids it consumed
        that are seen hand-offs to ``session`` not linked to a turn yet; a turn with no
        such msg_id is left out.  Returns the turns that linked a msg_id now."""
        done = []
        with self._write() as conn:
            for turn in turns:
                if self._record_turn(conn, session, turn, now_ms):
                    done.append(turn)
        return done

    def _record_turn(self, conn: Connection, session: str, turn: EndedTurn, now_ms: int) -> bool:
        linkable = [
            msg_id
            for msg_id in dict.fromkeys(turn.msg_ids)
            if conn.execute(
                "SELECT 1 FROM swarm_messages WHERE msg_id = ? AND to_session = ?"
                " AND state = 'handed_off' AND verified_at IS NOT NULL"
                " AND NOT EXISTS (SELECT 1 FROM swarm_turn_messages AS tm"
                " WHERE tm.msg_id = swarm_messages.msg_id)",
                (msg_id, session),
            ).fetchone()
        ]
        if not linkable:
            return False
        usage = turn.usage
        conn.execute(
            "INSERT INTO swarm_turns (turn_id, session, turn_key, recorded_at, input_tokens,"
            " output_tokens, reasoning_tokens, cache_read_tokens, cache_write_tokens, cost)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session, turn_key) DO NOTHING",
            (make_turn_id(now_ms), session, turn.key, now_ms, usage.input, usage.output,
             usage.reasoning, usage.cache_read, usage.cache_write, usage.cost),
        )  # fmt: skip
        turn_id = conn.execute(
            "SELECT turn_id FROM swarm_turns WHERE session = ? AND turn_key = ?",
            (session, turn.key),
        ).fetchone()[0]
        for msg_id in linkable:
            conn.execute(
                "INSERT INTO swarm_turn_messages (msg_id, turn_id) VALUES (?, ?)"
                " ON CONFLICT (msg_id) DO NOTHING",  # another daemon's look, at the same time
                (msg_id, turn_id),
            )
        return True

    @reads
    def linked(self, msg_ids: Sequence[str]) -> set[str]:
        """Those of ``msg_ids`` a recorded turn consumed."""
        found: set[str] = set()
        for chunk in _chunks(msg_ids):
            marks = ", ".join("?" * len(chunk))
            rows = self._conn.execute(
                f"SELECT msg_id FROM swarm_turn_messages WHERE msg_id IN ({marks})", chunk
            ).fetchall()
            found.update(str(r[0]) for r in rows)
        return found

    @reads
    def turn_of(self, msg_id: str) -> tuple[str, CostTotals] | None:
        """The turn ``msg_id`` is linked to (its id, and its usage as one turn's totals)."""
        row = self._conn.execute(
            f"SELECT t.turn_id, {_SUMS_SQL} FROM swarm_turn_messages AS tm"
            " JOIN swarm_turns AS t ON t.turn_id = tm.turn_id WHERE tm.msg_id = ?"
            " GROUP BY t.turn_id",
            (msg_id,),
        ).fetchone()
        return None if row is None else (str(row[0]), _totals(row[1:]))

    @reads
    def session_costs(
        self, sessions: Sequence[str] | None = None, limit: int = LIST_LIMIT
    ) -> dict[str, CostTotals]:
        """The sums of the turns each session ran (as a target), for ``sessions`` (those
        with none are left out), or the ``limit`` sessions with the newest turns, newest
        first."""
        if sessions is None:
            rows = self._conn.execute(
                f"SELECT session, {_SUMS_SQL} FROM swarm_turns GROUP BY session"
                " ORDER BY MAX(recorded_at) DESC, session LIMIT ?",
                (limit,),
            ).fetchall()
            return {str(r[0]): _totals(r[1:]) for r in rows}
        found: dict[str, CostTotals] = {}
        for chunk in _chunks(sessions):
            marks = ", ".join("?" * len(chunk))
            rows = self._conn.execute(
                f"SELECT session, {_SUMS_SQL} FROM swarm_turns WHERE session IN ({marks})"
                " GROUP BY session",
                chunk,
            ).fetchall()
            found.update({str(r[0]): _totals(r[1:]) for r in rows})
        return found

    @reads
    def thread_costs(self, thread_ids: Sequence[str]) -> dict[str, CostTotals]:
        """The sums of the turns each thread's messages caused (a thread with none is
        left out): ``pigeon threads``' and the TUI's tokens and cost columns."""
        found: dict[str, CostTotals] = {}
        for chunk in _chunks(thread_ids):
            marks = ", ".join("?" * len(chunk))
            rows = self._conn.execute(
                f"SELECT x.thread_id, {_SUMS_SQL} FROM ({_THREAD_TURNS_SQL}"
                f" WHERE m.thread_id IN ({marks})) AS x"
                " JOIN swarm_turns AS t ON t.turn_id = x.turn_id GROUP BY x.thread_id",
                chunk,
            ).fetchall()
            found.update({str(r[0]): _totals(r[1:]) for r in rows})
        return found

    @reads
    def thread_session_costs(self, thread_id: str) -> dict[str, CostTotals]:
        """Where ``thread_id``'s turns ran: the sums of its turns per session (target)."""
        rows = self._conn.execute(
            f"SELECT t.session, {_SUMS_SQL} FROM ({_THREAD_TURNS_SQL} WHERE m.thread_id = ?)"
            " AS x JOIN swarm_turns AS t ON t.turn_id = x.turn_id GROUP BY t.session"
            " ORDER BY MAX(t.recorded_at) DESC, t.session",
            (thread_id,),
        ).fetchall()
        return {str(r[0]): _totals(r[1:]) for r in rows}

    @reads
    def recent_thread_costs(self, limit: int = LIST_LIMIT) -> dict[str, CostTotals]:
        """The sums of the ``limit`` latest threads (by their latest send, as ``GET
        /swarm/threads`` lists them), newest first, zeros for one without turns: a walk of
        idx_swarm_threads_updated, then of each thread's messages, never of every turn."""
        rows = self._conn.execute(
            "SELECT thread_id FROM swarm_threads ORDER BY updated_at DESC, thread_id LIMIT ?",
            (limit,),
        ).fetchall()
        latest = [str(r[0]) for r in rows]
        sums = self.thread_costs(latest)
        return {thread: sums.get(thread, NO_COST) for thread in latest}

    @reads
    def thread_costs_since(self, thread_id: str, since_ms: int) -> CostTotals:
        """The sums of ``thread_id``'s turns recorded after ``since_ms`` (the budget brake's
        base: its last ``budget:<thread>`` reset)."""
        return _totals(self._conn.execute(_SINCE_SQL, (thread_id, since_ms)).fetchone())


def raise_budget(conn: Connection, thread_id: str, by: int, since_ms: int) -> None:
    """Inside a release with ``raise`` of a budget hold: ``thread_id``'s own token budget
    (swarm_threads.token_budget) becomes the tokens it used since ``since_ms`` (its last
    budget reset), or its own budget if higher, plus ``by``: ``by`` tokens more from now."""
    row = conn.execute(
        "SELECT token_budget FROM swarm_threads WHERE thread_id = ?", (thread_id,)
    ).fetchone()
    if row is None:
        return
    own = 0 if row[0] is None else int(row[0])
    used = _totals(conn.execute(_SINCE_SQL, (thread_id, since_ms)).fetchone()).tokens
    conn.execute(
        "UPDATE swarm_threads SET token_budget = ? WHERE thread_id = ?",
        (max(own, used) + by, thread_id),
    )
