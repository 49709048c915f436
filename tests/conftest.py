"""Shared fixtures: a real WAL database file per test, a fake clock, daemon processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from pigeond.storage import SwarmRepository, open_database
from tests.daemon_process import DaemonFactory

# A fixed start time (2026-11-01T00:00:00Z), so ids and timestamps are predictable.
START_S = 1_793_491_200.0


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "pigeond.db"


@pytest.fixture
def repo(db_path: Path) -> Iterator[SwarmRepository]:
    repository = SwarmRepository(open_database(db_path))
    yield repository
    repository.close()


@pytest.fixture
def clock() -> Clock:
    c = Clock()
    c.advance(START_S)
    return c


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[DaemonFactory]:
    """Starts pigeond subprocesses for one test; whatever still runs is stopped after it."""
    factory = DaemonFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()
