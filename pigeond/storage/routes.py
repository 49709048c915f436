"""Which daemon delivers to which session: ``swarm_routes`` (migration 15).

Several daemons may share one PostgreSQL database, each beside its own opencode.  A
message is handed off only by the daemon whose opencode has its target, so each daemon
records the sessions its opencode has (what its registry found, what its event stream
shows): a route names the daemon, its opencode's URL and when the session was last seen
there.  A route is taken over only when its daemon has not seen the session for
``stale_ms`` (that daemon is gone, or the session left its opencode): two daemons whose
opencodes both answer for one session (one opencode shared) do not take it from each
other every tick.  Times come in as unix milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from pigeond.storage.base import Connection, RepositoryBase, reads
from pigeond.storage.write_marks import shares_commit

ROUTE_COLUMNS = "session, daemon, opencode_url, last_seen_at"


@dataclass(frozen=True, slots=True)
class Route:
    session: str
    daemon: str
    opencode_url: str
    last_seen_at: int

    def view(self) -> dict[str, object]:
        return {
            "session": self.session,
            "daemon": self.daemon,
            "opencode_url": self.opencode_url,
            "last_seen": self.last_seen_at,
        }


def _route(row: tuple[object, ...]) -> Route:
    session, daemon, url, seen = row
    return Route(str(session), str(daemon), str(url), int(str(seen)))


class Routes(RepositoryBase):
    @reads
    def route_of(self, session: str) -> Route | None:
        row = self._conn.execute(
            f"SELECT {ROUTE_COLUMNS} FROM swarm_routes WHERE session = ?", (session,)
        ).fetchone()
        return None if row is None else _route(row)

    @reads
    def routes(self, limit: int = 1000) -> list[Route]:
        """Every route, by session."""
        rows = self._conn.execute(
            f"SELECT {ROUTE_COLUMNS} FROM swarm_routes ORDER BY session LIMIT ?", (limit,)
        ).fetchall()
        return [_route(r) for r in rows]

    @shares_commit
    def record_routes(
        self, sessions: list[str], daemon: str, opencode_url: str, now_ms: int, stale_ms: int
    ) -> list[str]:
        """``daemon``'s opencode has ``sessions`` now: each route becomes (or stays) the
        daemon's, unless another daemon saw the session within ``stale_ms``.  Returns the
        sessions routed to ``daemon`` after the write."""
        if not sessions:
            return []
        with self._write() as conn:
            mine = []
            for session in sessions:
                if self._record(conn, session, daemon, opencode_url, now_ms, now_ms - stale_ms):
                    mine.append(session)
            return mine

    @staticmethod
    def _record(
        conn: Connection, session: str, daemon: str, url: str, now_ms: int, stale_before: int
    ) -> bool:
        row = conn.execute(
            "INSERT INTO swarm_routes (session, daemon, opencode_url, last_seen_at)"
            " VALUES (:session, :daemon, :url, :now)"
            " ON CONFLICT (session) DO UPDATE SET daemon = excluded.daemon,"
            " opencode_url = excluded.opencode_url, last_seen_at = excluded.last_seen_at"
            " WHERE swarm_routes.daemon = excluded.daemon"
            " OR swarm_routes.last_seen_at < :stale_before"
            " RETURNING daemon",
            {"session": session, "daemon": daemon, "url": url, "now": now_ms,
             "stale_before": stale_before},
        ).fetchone()  # fmt: skip
        return row is not None

    def drop_route(self, session: str, daemon: str) -> bool:
        """``daemon``'s opencode no longer has ``session``: its route goes (another
        daemon's route of it stays).  Whether one went."""
        with self._write() as conn:
            cursor = conn.execute(
                "DELETE FROM swarm_routes WHERE session = ? AND daemon = ?", (session, daemon)
            )
            return cursor.rowcount > 0
