"""Shared fixtures: a real WAL database file per test and a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from pigeond.storage import SwarmRepository, open_database

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
