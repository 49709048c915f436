"""All SQL lives in this package: the daemon, the CLIs and the TUI go through it."""

from pigeond.storage.errors import SchemaError, StorageError, StorageUnavailable
from pigeond.storage.repository import AcceptOutcome, InboxPage, SwarmRepository
from pigeond.storage.schema import SCHEMA_VERSION, connect, migrate, open_database

__all__ = [
    "SCHEMA_VERSION",
    "AcceptOutcome",
    "InboxPage",
    "SchemaError",
    "StorageError",
    "StorageUnavailable",
    "SwarmRepository",
    "connect",
    "migrate",
    "open_database",
]
