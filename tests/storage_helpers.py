"""The database for tests: opened as components on a ``Clock`` take it (calls answered at
once, no threads), and filled with done history in bulk."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from treq.client import HTTPClient
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.model import NewMessage
from pigeond.service.daemon import Daemon
from pigeond.service.wiring import build_daemon
from pigeond.storage import AcceptOutcome, SwarmRepository, connect, open_database
from pigeond.storage.base import Connection
from pigeond.storage.database import InlineDatabase
from pigeond.storage.engines import POSTGRES, engine_of
from pigeond.storage.postgres import open_postgres
from pigeond.storage.postgres.schema import SEARCH_DOC_SQL
from pigeond.storage.repository import Accept
from testkit.messages import new_message


def inline_database(path: Path) -> InlineDatabase:
    """The database at ``path``, opened and migrated as the daemon opens it."""
    return InlineDatabase(SwarmRepository(open_database(path)))


class CountingDatabase(InlineDatabase):
    """The repository's calls, answered at once and named in ``reads`` (writes too: a
    test of what touches the database at all)."""

    def __init__(self, repo: SwarmRepository, *, writes_too: bool = False) -> None:
        super().__init__(repo)
        self.reads: list[str] = []
        self._writes_too = writes_too

    def read(self, call: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        self.reads.append(call.__name__)
        return super().read(call, *args, **kwargs)

    def write(self, call: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        if self._writes_too:
            self.reads.append(call.__name__)
        return super().write(call, *args, **kwargs)


def clock_daemon(config: Config, clock: Clock, http: HTTPClient | None = None) -> Daemon:
    """The daemon as the entry point builds it, but with its database calls answered at
    once, so that a test on a ``Clock`` sees their effects without a reactor running."""
    return build_daemon(config, clock, http=http, db=inline_database(Path(config.db)))


def repo_of(daemon: Daemon) -> SwarmRepository:
    """The repository behind a :func:`clock_daemon`."""
    assert isinstance(daemon.db, InlineDatabase)
    return daemon.db.repo


def add_done_rows(conn: sqlite3.Connection, count: int, payload_bytes: int, at: int) -> None:
    """``count`` verified hand-offs of ``payload_bytes`` each, done at ``at``, in one insert
    (through the API every one would cost three fsyncs)."""
    conn.execute("BEGIN IMMEDIATE")
    accept, handoff = (
        int(conn.execute("SELECT value FROM swarm_sequences WHERE name = ?", (n,)).fetchone()[0])
        for n in ("accept", "handoff")
    )
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)"
        " INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, payload, state,"
        " created_at, updated_at, handed_off_at, accept_seq, handoff_seq, verified_at)"
        " SELECT printf('msg_done%08d', :accept + i), 'ses_s', printf('ses_t%d', i % 10), 'chat',"
        " substr(hex(randomblob(:bytes)), 1, :bytes), 'handed_off', :at, :at, :at,"
        " :accept + i, :handoff + i, :at FROM n",
        {"count": count, "bytes": payload_bytes, "at": at, "accept": accept, "handoff": handoff},
    )
    conn.execute("UPDATE swarm_sequences SET value = value + ? WHERE name = 'accept'", (count,))
    conn.execute("UPDATE swarm_sequences SET value = value + ? WHERE name = 'handoff'", (count,))
    conn.execute("COMMIT")


def seen_message(
    repo: SwarmRepository, msg_id: str, at: int, to: str = "ses_target", thread: str | None = None
) -> None:
    """Store ``msg_id`` for ``to`` (in ``thread``) as a hand-off seen in its transcript, all
    at ``at``."""
    repo.accept_many([Accept(new_message(to, msg_id=msg_id), at, thread_id=thread)])
    repo.mark_handed_off(msg_id, at, at + 60_000)
    assert repo.mark_verified([msg_id], at) == [msg_id]


def search_index_in_step(conn: Connection) -> bool:
    """Whether the FTS5 index holds exactly the tokens of the rows of swarm_messages (FTS5's
    own integrity check against its content table, which raises when they differ)."""
    if engine_of(conn) is POSTGRES:
        # PostgreSQL's search column is generated: it must equal its expression on every row
        row = conn.execute(
            f"SELECT bool_and(search_doc = {SEARCH_DOC_SQL}) FROM swarm_messages"
        ).fetchone()
        return row is not None and row[0] is not False
    try:
        conn.execute("INSERT INTO swarm_search (swarm_search, rank) VALUES ('integrity-check', 1)")
    except sqlite3.DatabaseError:
        return False
    return True


def column_names(repo: SwarmRepository) -> list[str]:
    """swarm_messages' columns in order, on either backend (PostgreSQL's search column,
    where SQLite has its FTS5 table, left out)."""
    if repo.engine is POSTGRES:
        rows = repo.connection.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'swarm_messages' AND column_name != 'search_doc'"
            " ORDER BY ordinal_position"
        ).fetchall()
        return [str(r[0]) for r in rows]
    return [str(r[1]) for r in repo.connection.execute("PRAGMA table_info(swarm_messages)")]


def stored_schema_version(repo: SwarmRepository) -> int:
    """The schema version the database says it has, on either backend."""
    if repo.engine is POSTGRES:
        return int(repo.connection.execute("SELECT version FROM swarm_schema").fetchone()[0])
    return int(repo.connection.execute("PRAGMA user_version").fetchone()[0])


def reopened(repo: SwarmRepository, db_path: Path) -> SwarmRepository:
    """A second repository on ``repo``'s database, through a connection of its own."""
    if repo.engine is POSTGRES:
        return SwarmRepository(open_postgres(repo.connection.url))  # type: ignore[attr-defined]
    return SwarmRepository(connect(db_path))


def accept_channel_alone(
    repo: SwarmRepository, message: NewMessage, now_ms: int, expires_at: int | None = None
) -> None:
    """``message`` (a channel message) stored with no member's copy, as pigeond stored one
    whose members were all left out before such a send was refused (issue 27): a member
    joins for the accept, then its copy is deleted and it leaves (other members keep
    theirs)."""
    assert message.channel is not None
    repo.join_channel(message.channel, "ses_passing", now_ms, 10_000)
    assert repo.accept(message, now_ms, expires_at) is AcceptOutcome.STORED
    repo.connection.execute(
        "DELETE FROM swarm_messages WHERE channel_msg_id = ? AND to_session = 'ses_passing'",
        (message.msg_id,),
    )
    repo.leave_channel(message.channel, "ses_passing")
