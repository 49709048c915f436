"""Errors the storage layer raises, so callers need not know sqlite3 or psycopg."""

from __future__ import annotations

import sqlite3
from typing import Final

import psycopg

# What the engines raise when the database cannot be used right now: SQLite's locked,
# full, read-only or vanished file; PostgreSQL's lost connection, shutdown, lock timeout
# or full disk (psycopg.OperationalError), or a connection closed under a call.  The
# storage package answers each as StorageUnavailable: nothing was changed, try later.
UNAVAILABLE_ERRORS: Final = (
    sqlite3.OperationalError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


class StorageError(Exception):
    """Base class for storage failures."""


class SchemaError(StorageError):
    """The file is not a database this pigeond can use (corrupt, foreign, or too new)."""


class StorageUnavailable(StorageError):
    """The database cannot be used right now: a write could not be made durable (disk
    full, read-only file, a lock held past the busy timeout), a read failed, or the
    database is closed (pigeond is stopping).

    Nothing was changed; the HTTP layer answers 503 and the caller may retry.  The
    arbiter and the verifier try again later without charging any message for it.
    """
