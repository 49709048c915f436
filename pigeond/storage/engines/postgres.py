"""PostgreSQL: one database that daemons on several hosts share.

A write transaction is a plain ``BEGIN``: rows, not the database, are locked.  The
full-text index is a generated ``tsvector`` column under a GIN index, which PostgreSQL
keeps itself, so nothing is done at a commit or after a prune.  An accept that checks the
queue's bytes takes an advisory lock held to its commit, so two daemons' accepts cannot
both fit under the bound; an accept wakes the daemons that deliver to its targets
(``NOTIFY``, delivered at the commit).  Space freed by pruning is PostgreSQL's
autovacuum's to reuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from pigeond.storage.columns import COLUMNS
from pigeond.storage.engines.base import Connection, EngineSql, FileSize
from pigeond.storage.existing import open_existing_postgres
from pigeond.storage.postgres import open_postgres
from pigeond.storage.postgres.schema import CHANGED_SQL, NOTIFY_ACCEPTED_SQL, NOTIFY_SQL
from pigeond.storage.schema import EventLog
from pigeond.storage.search_text import check_searchable, search_words

# The advisory lock of the queue's bytes ("pigequeu" in ASCII), held by an accept
# transaction that checks the bound.
QUEUE_BYTES_LOCK: Final = 0x7069_6765_7175_6575
# PostgreSQL's page, in which pg_database_size is counted here
PAGE_BYTES: Final = 8192


def postgres_search_sql(words: int) -> str:
    """The same search on PostgreSQL: its generated ``search_doc`` (schema version 13
    there) matched by every word as a phrase (``:w0`` ...), punctuation splitting words
    as it does in the document; newest first by accept order."""
    phrases = " && ".join(
        f"phraseto_tsquery('simple', regexp_replace(:w{i}, '[[:punct:]]', ' ', 'g'))"
        for i in range(words)
    )
    return (
        f"SELECT {COLUMNS} FROM swarm_messages AS m WHERE m.search_doc @@ ({phrases})"
        " AND (CAST(:state AS TEXT) IS NULL OR m.state = :state)"
        " AND (CAST(:session AS TEXT) IS NULL OR m.to_session = :session"
        " OR (m.from_session = :session AND m.channel_msg_id IS NULL))"
        " ORDER BY m.accept_seq DESC LIMIT :limit OFFSET :offset"
    )


class PostgresEngine:
    """The PostgreSQL engine (see the module)."""

    name: Final = "postgresql"
    begin_write: Final = "BEGIN"
    shared: Final = True
    reclaims_space_itself: Final = True

    def sql(self, query: EngineSql) -> str:
        return query.postgres

    def open_writer(self, db: Path | str, *, busy_timeout_ms: int, log: EventLog) -> Connection:
        return open_postgres(str(db), lock_timeout_ms=busy_timeout_ms)

    def open_reader(self, db: Path | str, *, busy_timeout_ms: int) -> Connection:
        return open_postgres(str(db), read_only=True)

    def open_existing(self, db: Path | str) -> Connection:
        return open_existing_postgres(str(db))

    def search(self, text: str, session: str | None) -> tuple[str, Mapping[str, object]]:
        words = search_words(text)
        if session is not None:
            check_searchable(session, "the session")
        params: dict[str, object] = {f"w{i}": word for i, word in enumerate(words)}
        params["session"] = session
        return postgres_search_sql(len(words)), params

    def has_search_upkeep(self, conn: Connection) -> bool:
        return False  # the search column is generated: PostgreSQL keeps it

    def index_pending(self, conn: Connection) -> None:
        pass

    def after_prune(self, conn: Connection) -> None:
        pass  # a GIN index drops a deleted row's entries at the next vacuum

    def lock_queue_bytes(self, conn: Connection) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(?)", (QUEUE_BYTES_LOCK,))

    def notify_accepted(self, conn: Connection, first_seq: int, last_seq: int) -> None:
        if last_seq >= first_seq:
            conn.execute(NOTIFY_ACCEPTED_SQL, (first_seq, last_seq))

    def notify_due(self, conn: Connection, targets: Sequence[str]) -> None:
        if targets:
            conn.execute(NOTIFY_SQL, (list(targets),))

    def notify_changed(self, conn: Connection) -> None:
        conn.execute(CHANGED_SQL)

    def file_size(self, conn: Connection) -> FileSize:
        """Its pages as pg_database_size counts them, none free here: PostgreSQL's own
        (auto)vacuum gives space back."""
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return FileSize(int(size[0]) // PAGE_BYTES, PAGE_BYTES, 0, False)

    def give_back_pages(self, conn: Connection, max_pages: int) -> int:
        return 0  # PostgreSQL's autovacuum does this


POSTGRES: Final = PostgresEngine()
