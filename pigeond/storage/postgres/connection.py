"""A PostgreSQL connection that the repository uses as it uses a ``sqlite3.Connection``.

The storage package's queries take their parameters as both engines' queries do, ``?``
and ``:name`` (sqlite3's styles); psycopg takes ``%s`` and ``%(name)s``.  So this
connection puts each statement's placeholders in psycopg's style (once per text:
cached), a literal ``%`` doubled, and changes nothing else: a query whose SQL differs
between the engines is written in each engine's form (pigeond/storage/engines/), never
made from the other's text.

Transactions are explicit, as on SQLite: the psycopg connection is in autocommit mode
and the repository sends ``BEGIN`` and ``COMMIT``.  On a writer connection
(``pipelined_writes``) a write transaction goes in one libpq pipeline: ``BEGIN``, and each
statement whose answer nobody reads yet, go out with the next statement whose answer is
read (a row, a rowcount) or with the ``COMMIT``, not one round trip each.  Every
statement still runs, in order, in the one transaction; ``COMMIT`` returns only once
PostgreSQL has answered it (durable), and an error of any statement is raised at the
latest there (the transaction is then rolled back as before).  Round trips are what a
write costs when PostgreSQL's processes share a busy CPU with pigeond: each waits for
the server's process, then pigeond's thread, to be scheduled again.

A connection PostgreSQL closed (a restart, a cut network) raises
:class:`psycopg.OperationalError`, which the storage package answers as
``StorageUnavailable`` (a 503, a retry later); the next statement opens a new
connection, so the daemon resumes by itself when PostgreSQL is back.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import psycopg
from psycopg import pq
from psycopg.types.string import StrDumper
from psycopg_pool import ConnectionPool, PoolTimeout

# A quoted literal (kept whole), a ``?``, a ``:name`` (not a ``::`` cast) or a ``%``.
_TOKEN: Final = re.compile(r"'(?:[^']|'')*'|\?|(?<![:\w]):([A-Za-z_]\w*)|%")
CONNECT_TIMEOUT_S: Final = 5


@functools.lru_cache(maxsize=1024)
def placeholders(sql: str, with_params: bool) -> str:
    """``sql`` with psycopg's placeholders (see the module's docstring).  Without
    parameters psycopg does not read placeholders, so ``%`` stays as it is."""
    if not with_params:
        return sql

    def placeholder(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith("'"):
            return token.replace("%", "%%")
        if token == "?":
            return "%s"
        if token == "%":
            return "%%"
        return f"%({match.group(1)})s"

    return _TOKEN.sub(placeholder, sql)


class PgCursor:
    """What the repository reads of a cursor: rows (one at a time or all), and rowcount."""

    def __init__(
        self, cursor: psycopg.Cursor[tuple[Any, ...]], pipeline: psycopg.Pipeline | None = None
    ) -> None:
        self._cursor = cursor
        self._pipeline = pipeline  # its statement's result is still to come

    def _result(self) -> psycopg.Cursor[tuple[Any, ...]]:
        """The cursor once its statement's result is here: a pipeline still holding it
        sends everything queued and waits for every answer (raising the first error)."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None and self._cursor.pgresult is None:
            pipeline.sync()
        return self._cursor

    @property
    def rowcount(self) -> int:
        return self._result().rowcount

    @property
    def description(self) -> Any:
        return self._result().description

    def fetchone(self) -> tuple[Any, ...] | None:
        cursor = self._result()
        return cursor.fetchone() if cursor.description else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        cursor = self._result()
        return cursor.fetchall() if cursor.description else []

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())

    def close(self) -> None:
        self._cursor.close()


class PgConnection:
    """One PostgreSQL session for one thread of the repository (see the module)."""

    def __init__(
        self,
        url: str,
        *,
        read_only: bool = False,
        lock_timeout_ms: int | None = None,
        pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] | None = None,
    ) -> None:
        """``pool``: borrow the connection from it, and give it back at :meth:`close`
        (the operator tools: pigeond/storage/postgres/pooled.py)."""
        self.url = url
        self._pool = pool
        # each write transaction in one pipeline (see the module); set by open_postgres
        # once the schema is up to date (a migration's script cannot go in a pipeline)
        self.pipelined_writes = False
        self._pipeline: psycopg.Pipeline | None = None
        self._leave_pipeline: contextlib.ExitStack | None = None
        self.read_only = read_only
        self.lock_timeout_ms = lock_timeout_ms
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._closed = False
        # how many sessions this connection has opened: a new one holds none of the old
        # session's advisory locks (see pigeond/storage/postgres/locks.py)
        self.generation = 0
        self._connection()  # fail at once on a bad URL or an unreachable server

    def _connection(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._closed:
            raise psycopg.InterfaceError("the connection is closed")
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                self._give_back()
            self._pipeline = self._leave_pipeline = None  # it went with the connection
            if self._pool is not None:
                try:
                    self._conn = self._pool.getconn()
                except PoolTimeout:
                    # the pool says only that it timed out: one direct try says why
                    psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT_S).close()
                    raise psycopg.OperationalError("no connection to PostgreSQL in time") from None
                self.generation += 1
                return self._conn
            conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                application_name="pigeond",
            )  # fmt: skip
            # str as text (psycopg's default says "unknown", which PostgreSQL cannot type
            # in ``:target IS NULL OR to_session = :target``)
            conn.adapters.register_dumper(str, StrDumper)
            if self.read_only:
                conn.execute("SET default_transaction_read_only = on")
            if self.lock_timeout_ms is not None:
                conn.execute(f"SET lock_timeout = {int(self.lock_timeout_ms)}")
            self._conn = conn
            self.generation += 1
        return self._conn

    @property
    def raw(self) -> psycopg.Connection[tuple[Any, ...]]:
        """The psycopg connection itself (opened again if PostgreSQL closed it)."""
        return self._connection()

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None
    ) -> PgCursor:
        conn = self._connection()
        if sql == "BEGIN" and self.pipelined_writes and self._pipeline is None:
            self._leave_pipeline = contextlib.ExitStack()
            self._pipeline = self._leave_pipeline.enter_context(conn.pipeline())
        elif sql == "ROLLBACK":
            self._abandon_pipeline()
        with_params = bool(params)
        query = placeholders(sql, with_params)
        cursor = conn.cursor()
        if sql != "COMMIT" or self._pipeline is None:
            cursor.execute(query, params if with_params else None)
            return PgCursor(cursor, self._pipeline)
        try:
            cursor.execute(query)
        except BaseException:
            self._abandon_pipeline()
            raise
        self._end_pipeline()  # the answer to COMMIT: durable from here
        return PgCursor(cursor)

    def _end_pipeline(self) -> None:
        """Leave the transaction's pipeline: send what is queued and wait for every answer,
        raising the first error (the transaction is then still open, aborted)."""
        leave, self._leave_pipeline, self._pipeline = self._leave_pipeline, None, None
        if leave is not None:
            leave.close()

    def _abandon_pipeline(self) -> None:
        """Leave the pipeline of a transaction being rolled back: what it queued is waited
        for, its error (already raised to the caller, or why it rolls back) dropped, so
        that the ``ROLLBACK`` itself runs, out of the aborted part of the pipeline."""
        with contextlib.suppress(psycopg.Error):
            self._end_pipeline()

    def execute_script(self, sql: str) -> None:
        """Run a script of several statements (a migration), with no parameters."""
        self._connection().execute(sql.encode("utf-8"))

    @property
    def in_transaction(self) -> bool:
        if self._conn is None or self._conn.closed:
            return False
        if self._pipeline is not None:
            return True  # its BEGIN may not even have been sent yet
        return self._conn.info.transaction_status != pq.TransactionStatus.IDLE

    def close(self) -> None:
        self._closed = True
        self._give_back()

    def _give_back(self) -> None:
        """Close the connection, or give it back to its pool (which takes back only a
        healthy one in no transaction)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._pool is None:
            conn.close()
        else:
            self._pool.putconn(conn)
