"""Shared fixtures: a real WAL database file per test, a fake clock, daemon processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogEvent, LogLevel, formatEvent, globalLogPublisher
from zope.interface import implementer

from pigeond.storage import SwarmRepository, open_database
from tests.daemon_process import DaemonFactory
from tests.fixed_time import START_S


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
    """A fake clock at the fixed start time (tests/fixed_time.py)."""
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


@implementer(ILogObserver)
class LogCapture:
    """Keeps every log event emitted while it observes: its level and formatted text."""

    def __init__(self) -> None:
        self.events: list[tuple[LogLevel, str]] = []
        self.lines: list[str] = []

    def __call__(self, event: LogEvent) -> None:
        text = formatEvent(event) or ""
        self.events.append((event["log_level"], text))
        self.lines.append(text)


@pytest.fixture
def log_capture() -> Iterator[LogCapture]:
    capture = LogCapture()
    globalLogPublisher.addObserver(capture)
    yield capture
    globalLogPublisher.removeObserver(capture)


@pytest.fixture
def log_events(log_capture: LogCapture) -> list[tuple[LogLevel, str]]:
    """Every log event of the test: its level and text."""
    return log_capture.events


@pytest.fixture
def logged(log_capture: LogCapture) -> list[str]:
    """Every log line emitted during the test, formatted."""
    return log_capture.lines
