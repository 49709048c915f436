"""Errors the storage layer raises, so callers need not know sqlite3."""

from __future__ import annotations


class StorageError(Exception):
    """Base class for storage failures."""


class SchemaError(StorageError):
    """The file is not a database this pigeond can use (corrupt, foreign, or too new)."""


class StorageUnavailable(StorageError):
    """A write could not be made durable: disk full, read-only file, or lock timeout.

    The HTTP layer answers 503 for it: the caller may retry, nothing was stored.
    """
