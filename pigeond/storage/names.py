"""Names sessions claim (``reviewer``), held in ``swarm_names`` (migration 11).

A name has one holder and a session holds at most one name: claiming a second gives the
first up, so a message's ``from_name`` is never ambiguous.  Whether a claim may take a name
from another session is the caller's judgement (that session is gone, or ``force``), made
before the write and passed in as ``replace``: the write takes the name only if its holder
is still the one judged, so two claims racing for one name cannot both win.

``last_seen_at`` is kept by migration 11's triggers (a send from the holder, a hand-off
to it); a claim sets it too.  Times come in as unix milliseconds: nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pigeond.storage.base import Connection, RepositoryBase, reads

# The names two sessions hold (the second may be None): ``(session, name)`` rows.
HELD_NAMES_SQL = "SELECT session, name FROM swarm_names WHERE session IN (?, ?)"


def names_from(
    rows: list[tuple[str, str]], sender: str, target: str | None
) -> tuple[str | None, str | None]:
    """The names ``sender`` and ``target`` hold, from :data:`HELD_NAMES_SQL`'s rows."""
    held = dict(rows)
    return held.get(sender), None if target is None else held.get(target)


class ClaimOutcome(Enum):
    CLAIMED = "claimed"  # the name was free, or taken from the holder passed as ``replace``
    KEPT = "kept"  # the session already held it
    HELD = "held"  # another session holds it (``holder``); nothing written


# ``replace`` for a forced claim: whoever holds the name loses it.
ANY_HOLDER = "*"


@dataclass(frozen=True, slots=True)
class Claim:
    outcome: ClaimOutcome
    holder: str | None = None  # HELD: who holds it; CLAIMED: who held it before (or None)
    released: str | None = None  # the name the session gave up by claiming this one


@dataclass(frozen=True, slots=True)
class NameEntry:
    """One held name, as ``GET /swarm/names`` and ``pigeon names`` show it."""

    name: str
    session: str
    claimed_at: int
    last_seen_at: int

    def view(self) -> dict[str, object]:
        return {
            "name": self.name,
            "session": self.session,
            "since": self.claimed_at,
            "last_seen": self.last_seen_at,
        }


# The most names a listing shows (a swarm on one workstation has tens).
LIST_LIMIT = 1000


class Names(RepositoryBase):
    def claim_name(
        self, name: str, session: str, now_ms: int, *, replace: str | None = None
    ) -> Claim:
        """Give ``name`` to ``session`` unless another session holds it; a holder equal to
        ``replace`` (or any holder, with :data:`ANY_HOLDER`) loses it.  The session's
        previous name, if any, is given up in the same transaction."""
        with self._write() as conn:
            holder = self._holder(conn, name)
            if holder == session:
                return Claim(ClaimOutcome.KEPT, holder)
            if holder is not None and replace not in (holder, ANY_HOLDER):
                return Claim(ClaimOutcome.HELD, holder)
            row = conn.execute(
                "DELETE FROM swarm_names WHERE session = ? RETURNING name", (session,)
            ).fetchone()
            conn.execute("DELETE FROM swarm_names WHERE name = ?", (name,))
            conn.execute(
                "INSERT INTO swarm_names (name, session, claimed_at, last_seen_at)"
                " VALUES (?, ?, ?, ?)",
                (name, session, now_ms, now_ms),
            )
            return Claim(ClaimOutcome.CLAIMED, holder, None if row is None else str(row[0]))

    @reads
    def name_holder(self, name: str) -> str | None:
        """The session holding ``name`` now, or None."""
        return self._holder(self._conn, name)

    @reads
    def name_of(self, session: str) -> str | None:
        """The name ``session`` holds now, or None: what its next message would record as
        ``from_name``, and what an allow-list's ``@name`` entries are matched against."""
        return self._names_of(self._conn, session, None)[0]

    def release_name(self, name: str, session: str | None) -> str | None:
        """Free ``name``: released whoever holds it (``session`` None), or only if
        ``session`` holds it.  Returns the session that held it (None: nobody did, and
        nothing changed); it is released unless ``session`` was given and is another one.
        One transaction, so a claim racing the release cannot lose its name to it."""
        with self._write() as conn:
            holder = self._holder(conn, name)
            if holder is not None and session in (None, holder):
                conn.execute("DELETE FROM swarm_names WHERE name = ?", (name,))
            return holder

    @reads
    def names(self) -> list[NameEntry]:
        """Every held name, by name."""
        rows = self._conn.execute(
            "SELECT name, session, claimed_at, last_seen_at FROM swarm_names ORDER BY name LIMIT ?",
            (LIST_LIMIT,),
        ).fetchall()
        return [NameEntry(str(n), str(s), int(c), int(seen)) for n, s, c, seen in rows]

    @staticmethod
    def _holder(conn: Connection, name: str) -> str | None:
        row = conn.execute("SELECT session FROM swarm_names WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    @staticmethod
    def _names_of(
        conn: Connection, sender: str, target: str | None
    ) -> tuple[str | None, str | None]:
        """The names ``sender`` and ``target`` hold now (None for none): what an accepted
        message records as its ``from_name`` and, unless it was sent to a name, ``to_name``."""
        return names_from(conn.execute(HELD_NAMES_SQL, (sender, target)).fetchall(), sender, target)
