"""What differs between the two SQL engines pigeond stores on, named in one place.

The repository's queries are one set of SQL: what both SQLite and PostgreSQL take as it
is.  Where the engines' SQL differs, the query is an :class:`EngineSql`, written once for
each engine side by side, and the repository asks its :class:`Engine` for its form;
nothing is produced by rewriting the text of another.  What is more than a query (how a
write transaction begins, the full-text index's upkeep, waking other daemons, giving
space back) is a method of the engine.  Both engines keep the same placeholders (``?``
and ``:name``): the PostgreSQL connection hands them to psycopg in its own style
(:mod:`pigeond.storage.postgres.connection`).  A parameter that may be NULL and is only
tested (``CAST(:state AS TEXT) IS NULL OR state = :state``) is cast in the shared text:
PostgreSQL cannot type a NULL it is given otherwise, and SQLite takes the cast as it is.

The engine is chosen once, from the ``db`` setting (:func:`pigeond.storage.engines.
engine_for`), and a repository asks the connection it is given which engine it speaks
(:func:`pigeond.storage.engines.engine_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from pigeond.storage.schema import EventLog


class Cursor(Protocol):
    """What the repository reads of a cursor, on either engine."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...

    def close(self) -> None: ...


class Connection(Protocol):
    """What the repository needs of a connection: a ``sqlite3.Connection``, or a
    :class:`pigeond.storage.postgres.connection.PgConnection`."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...

    @property
    def in_transaction(self) -> bool: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class EngineSql:
    """One query (or part of one) where the engines' SQL differs: each engine's form."""

    sqlite: str
    postgres: str

    def map(self, build: Callable[[str], str]) -> EngineSql:
        """A query written around this part, once with each engine's form of it."""
        return EngineSql(sqlite=build(self.sqlite), postgres=build(self.postgres))


# The parts of a query the engines spell differently, for EngineSql.map.

# The name a row has within one statement (PostgreSQL's tables have no rowid).
ROW_NAME: Final = EngineSql(sqlite="rowid", postgres="ctid")


def json_texts(param: str) -> EngineSql:
    """The texts of the JSON array in ``param`` (a placeholder), as a table whose one
    column is ``value``."""
    return EngineSql(
        sqlite=f"json_each({param})", postgres=f"json_array_elements_text(CAST({param} AS json))"
    )


def unlikely(condition: str) -> EngineSql:
    """``condition``, which SQLite's planner is told is rarely true (statistics average
    over values and cannot say so); PostgreSQL has no such hint."""
    return EngineSql(sqlite=f"unlikely({condition})", postgres=condition)


def indexed_by(table: str, index: str) -> EngineSql:
    """``table`` read through ``index`` on SQLite, whose planner would pick another
    without statistics; PostgreSQL plans for itself."""
    return EngineSql(sqlite=f"{table} INDEXED BY {index}", postgres=table)


@dataclass(frozen=True, slots=True)
class FileSize:
    """The database's size in pages; ``free_pages`` are on the freelist, not yet given back."""

    page_count: int
    page_size: int
    free_pages: int
    incremental: bool

    @property
    def total_bytes(self) -> int:
        return self.page_count * self.page_size


class Engine(Protocol):
    """One SQL engine: its form of each query that differs, and what it does differently."""

    @property
    def name(self) -> str:
        """ "sqlite" or "postgresql": how the engine is named to a person."""

    @property
    def begin_write(self) -> str:
        """The statement that begins a write transaction."""

    @property
    def shared(self) -> bool:
        """Whether daemons on several hosts may share the database (locks, wake-ups)."""

    @property
    def reclaims_space_itself(self) -> bool:
        """Whether the engine makes the space of pruned rows reusable itself (autovacuum)."""

    def sql(self, query: EngineSql) -> str:
        """This engine's form of ``query``."""

    def open_writer(self, db: Path | str, *, busy_timeout_ms: int, log: EventLog) -> Connection:
        """The daemon's writing connection to ``db``, its schema brought up to date."""

    def open_reader(self, db: Path | str, *, busy_timeout_ms: int) -> Connection:
        """A connection to ``db`` that can only read (the daemon's reader threads)."""

    def open_existing(self, db: Path | str) -> Connection:
        """An operator's connection to ``db``, which must exist at the current schema
        (never created or migrated): SchemaError, or StorageUnavailable when out of reach."""

    def search(self, text: str, session: str | None) -> tuple[str, Mapping[str, object]]:
        """The full-text search of ``text`` (see pigeond/storage/search.py): its query, and
        its parameters but ``state``, ``limit`` and ``offset``."""

    def has_search_upkeep(self, conn: Connection) -> bool:
        """Whether the search index needs :meth:`index_pending` at each commit (on SQLite,
        once the schema has the index: migration 13)."""

    def index_pending(self, conn: Connection) -> None:
        """At a write's commit: index the rows it inserted."""

    def after_prune(self, conn: Connection) -> None:
        """After a prune batch deleted rows, in its transaction: keep the search index small."""

    def lock_queue_bytes(self, conn: Connection) -> None:
        """Before an accept sums the queue's bytes: keep other daemons' accepts out until
        the commit (pigeond/storage/queue_bytes.py)."""

    def notify_accepted(self, conn: Connection, first_seq: int, last_seq: int) -> None:
        """At the commit, wake the daemons that deliver to the targets of the deliveries
        numbered ``first_seq`` to ``last_seq`` (an accept's)."""

    def notify_due(self, conn: Connection, targets: Sequence[str]) -> None:
        """At the commit, wake the daemons that deliver to ``targets``."""

    def notify_changed(self, conn: Connection) -> None:
        """At the commit, tell every daemon that the database changed (its quiet tick reads
        again: pigeond/service/quiet.py), where no file shows it."""

    def file_size(self, conn: Connection) -> FileSize:
        """The database's size."""

    def give_back_pages(self, conn: Connection, max_pages: int) -> int:
        """Give at most ``max_pages`` free pages back to the file system; how many went."""
