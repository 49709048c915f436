"""Shared fixtures: a real WAL database file per test, a fake clock, daemon processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogEvent, LogLevel, formatEvent, globalLogPublisher
from zope.interface import implementer

from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.postgres import open_postgres
from testkit.agent_routes_standin import AgentRoutesStandIn
from testkit.daemon_process import DaemonFactory
from testkit.fake_opencode import FakeOpencode
from testkit.pg_cluster import PgCluster, running_cluster
from tests.claude_code import ClaudeCode, ClaudeInstallError, ensure_claude_code
from tests.fake_anthropic import FakeAnthropic
from tests.fixed_time import START_S
from tests.operator_sql import (
    SQLITE3_CLI,
    SQLITE3_MODULE,
    OperatorDb,
    make_operator_db,
    sqlite3_path,
)

# Synchronous tests run outside pytest-twisted's reactor (see tests/reactor_split.py).
pytest_plugins = ["tests.reactor_split"]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "pigeond.db"


# The backends a module marked ``both_backends`` runs its ``repo`` tests on; others use
# SQLite alone (the default, and the only backend of what is about a file).
BACKENDS = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``repo`` is one parametrized fixture: SQLite and PostgreSQL for storage tests
    (``pytestmark = pytest.mark.both_backends``), SQLite for the rest."""
    if "backend" in metafunc.fixturenames:
        both = metafunc.definition.get_closest_marker("both_backends") is not None
        sqlite_only = metafunc.definition.get_closest_marker("sqlite_only") is not None
        backends = BACKENDS if both and not sqlite_only else BACKENDS[:1]
        metafunc.parametrize("backend", backends, scope="function")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One private PostgreSQL cluster for the test session (testkit/pg_cluster.py)."""
    with running_cluster() as cluster:
        yield cluster


MIGRATED_TEMPLATE = "pigeond_migrated"


@pytest.fixture(scope="session")
def pg_migrated_template(pg_cluster: PgCluster) -> str:
    """A database of the cluster migrated once, by pigeond itself, to copy for each test."""
    pg_cluster.psql(f"CREATE DATABASE {MIGRATED_TEMPLATE} TEMPLATE template0")
    open_postgres(pg_cluster.url(MIGRATED_TEMPLATE)).close()
    return MIGRATED_TEMPLATE


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> Iterator[str]:
    """The URL of a new empty database in the test cluster, dropped after the test."""
    name = pg_cluster.create_database()
    yield pg_cluster.url(name)
    pg_cluster.drop_database(name)


@pytest.fixture
def pg_migrated_url(pg_cluster: PgCluster, pg_migrated_template: str) -> Iterator[str]:
    """The URL of a new database already at pigeond's schema, dropped after the test."""
    name = pg_cluster.create_database(template=pg_migrated_template)
    yield pg_cluster.url(name)
    pg_cluster.drop_database(name)


@pytest.fixture
def repo(request: pytest.FixtureRequest, backend: str, db_path: Path) -> Iterator[SwarmRepository]:
    """A migrated, empty repository on ``backend``: a WAL file, or a PostgreSQL database."""
    if backend == "postgresql":
        url = request.getfixturevalue("pg_migrated_url")
        repository = SwarmRepository(open_postgres(url))
    else:
        repository = SwarmRepository(open_database(db_path))
    yield repository
    repository.close()


@pytest.fixture
def operator_db(tmp_path: Path) -> OperatorDb:
    """The docs' $DB with messages in the states their queries look for
    (tests/operator_sql.py)."""
    return make_operator_db(tmp_path)


@pytest.fixture(params=[SQLITE3_CLI, SQLITE3_MODULE])
def sqlite_path(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """PATH for the docs' SQL: the machine's sqlite3, then Python's sqlite3 module standing
    in for it (tests/operator_sql.py)."""
    return sqlite3_path(request.param, tmp_path)


@pytest.fixture
def clock() -> Clock:
    """A fake clock at the fixed start time (tests/fixed_time.py)."""
    c = Clock()
    c.advance(START_S)
    return c


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeOpencode]:
    """A fake opencode on 127.0.0.1 (testkit/fake_opencode.py), stopped after the test."""
    with FakeOpencode(tmp_path / "opencode") as server:
        yield server


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


@pytest.fixture(scope="session")
def claude_binary() -> Path:
    """The pinned real Claude Code (tests/claude_code.py), installed with npm on first use."""
    try:
        return ensure_claude_code()
    except ClaudeInstallError as exc:  # fail, never skip: these tests are part of the suite
        pytest.fail(f"cannot install Claude Code: {exc}", pytrace=False)


@pytest.fixture
def fake_anthropic(tmp_path: Path) -> Iterator[FakeAnthropic]:
    """A fake Anthropic model on 127.0.0.1 (tests/fake_anthropic.py), its requests logged
    in tmp_path/fake_anthropic.jsonl."""
    fake = FakeAnthropic(log_path=tmp_path / "fake_anthropic.jsonl").start()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def claude(claude_binary: Path, fake_anthropic: FakeAnthropic, tmp_path: Path) -> ClaudeCode:
    """The real Claude Code in a private HOME (tmp_path/claude-home) against the fake model."""
    return ClaudeCode(claude_binary, tmp_path / "claude-home", fake_anthropic.base_url)


@pytest.fixture
def standin() -> Iterator[AgentRoutesStandIn]:
    """A stand-in of pigeond's agent routes on a Unix socket (testkit/agent_routes_standin.py),
    for pigeon-hook; a module may have a ``standin`` of its own (test_unsupported_api.py)."""
    server = AgentRoutesStandIn()
    try:
        yield server
    finally:
        server.close()
