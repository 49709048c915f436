"""The database as components on a ``Clock`` take it: calls answered at once, no threads."""

from __future__ import annotations

from pathlib import Path

from treq.client import HTTPClient
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.service.daemon import Daemon, build_daemon
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.database import InlineDatabase


def inline_database(path: Path) -> InlineDatabase:
    """The database at ``path``, opened and migrated as the daemon opens it."""
    return InlineDatabase(SwarmRepository(open_database(path)))


def clock_daemon(config: Config, clock: Clock, http: HTTPClient | None = None) -> Daemon:
    """The daemon as the entry point builds it, but with its database calls answered at
    once, so that a test on a ``Clock`` sees their effects without a reactor running."""
    return build_daemon(config, clock, http=http, db=inline_database(Path(config.db)))


def repo_of(daemon: Daemon) -> SwarmRepository:
    """The repository behind a :func:`clock_daemon`."""
    assert isinstance(daemon.db, InlineDatabase)
    return daemon.db.repo
