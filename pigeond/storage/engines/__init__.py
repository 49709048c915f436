"""The SQL engines pigeond stores on, SQLite and PostgreSQL (see :mod:`.base`), and the one
place where the ``db`` setting chooses between them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pigeond.db_url import is_postgres_url
from pigeond.storage.engines.base import (
    ROW_NAME,
    Connection,
    Engine,
    EngineSql,
    FileSize,
    indexed_by,
    json_texts,
    unlikely,
)
from pigeond.storage.engines.postgres import POSTGRES
from pigeond.storage.engines.sqlite import SQLITE

__all__ = [
    "POSTGRES",
    "ROW_NAME",
    "SQLITE",
    "Engine",
    "EngineSql",
    "FileSize",
    "engine_for",
    "engine_of",
    "indexed_by",
    "json_texts",
    "unlikely",
]


def engine_for(db: Path | str) -> Engine:
    """The engine of the ``db`` setting: PostgreSQL for a ``postgresql://`` URL, else a
    SQLite file at that path."""
    return POSTGRES if is_postgres_url(db) else SQLITE


def engine_of(conn: Connection) -> Engine:
    """The engine ``conn`` speaks: a ``sqlite3.Connection`` is SQLite's, any other pigeond
    connection PostgreSQL's (the engine that opened it, :func:`engine_for`)."""
    return SQLITE if isinstance(conn, sqlite3.Connection) else POSTGRES
