"""Errors the storage layer raises, so callers need not know sqlite3."""

from __future__ import annotations


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
