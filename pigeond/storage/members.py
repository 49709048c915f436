"""Members of the runtimes that are not opencode: ``swarm_members`` (migration 16).

opencode knows its own sessions (pigeond asks it); a Claude Code session or an MCP-only
member says itself that it exists: a Claude Code session's hooks register it with the
transcript its hand-offs are verified in, an MCP-only member when it reads.  A send to
such a member is accepted once it has registered (or holds a name).  Times come in as
unix milliseconds; nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from pigeond.storage.base import RepositoryBase, reads

MEMBER_COLUMNS = "session, runtime, transcript_path, registered_at, last_seen_at"


@dataclass(frozen=True, slots=True)
class Member:
    session: str
    runtime: str
    transcript_path: str | None
    registered_at: int
    last_seen_at: int


def _member(row: tuple[object, ...]) -> Member:
    session, runtime, path, registered, seen = row
    return Member(
        str(session), str(runtime), None if path is None else str(path),
        int(str(registered)), int(str(seen)),
    )  # fmt: skip


class Members(RepositoryBase):
    def register_member(
        self, session: str, runtime: str, transcript_path: str | None, now_ms: int
    ) -> Member:
        """``session`` (of ``runtime``) exists now, its transcript at ``transcript_path``
        (None keeps the one known)."""
        with self._write() as conn:
            row = conn.execute(
                "INSERT INTO swarm_members"
                " (session, runtime, transcript_path, registered_at, last_seen_at)"
                " VALUES (:session, :runtime, :path, :now, :now)"
                " ON CONFLICT (session) DO UPDATE SET runtime = excluded.runtime,"
                " transcript_path = coalesce(excluded.transcript_path,"
                " swarm_members.transcript_path), last_seen_at = excluded.last_seen_at"
                f" RETURNING {MEMBER_COLUMNS}",
                {"session": session, "runtime": runtime, "path": transcript_path, "now": now_ms},
            ).fetchone()  # fmt: skip
            return _member(row)

    @reads
    def member(self, session: str) -> Member | None:
        row = self._conn.execute(
            f"SELECT {MEMBER_COLUMNS} FROM swarm_members WHERE session = ?", (session,)
        ).fetchone()
        return None if row is None else _member(row)

    @reads
    def is_known_member(self, session: str) -> bool:
        """Whether ``session`` registered, or holds a name (an MCP-only member claims its
        name before it ever reads)."""
        row = self._conn.execute(
            "SELECT 1 FROM swarm_members WHERE session = ?"
            " UNION ALL SELECT 1 FROM swarm_names WHERE session = ? LIMIT 1",
            (session, session),
        ).fetchone()
        return row is not None
