"""Fixtures for the end-to-end tests: the real opencode, offline, with a fake LLM.

* ``fake_llm``: the session's :class:`FakeLLM`, reset (records, maxima,
  ``delay_s``) before every test.
* ``opencode_1_18`` / ``opencode_1_15``: one ``opencode serve`` per pinned
  version for the whole session (start-up takes seconds), installed on first
  use into the cache (see :mod:`tests.e2e.opencode_dist`).
* ``opencode_any``: each test that uses it runs once per version.
* ``pigeond``: a :class:`DaemonFactory` whose daemons are stopped after the test.

Every test in this folder is marked ``e2e`` (and ``slow``, so ``make unit``
leaves them out).  A test may stop a shared opencode (an outage test); if it
leaves it stopped, it is started again before the next test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon_process import DaemonFactory
from tests.e2e.fake_llm import FakeLLM
from tests.e2e.opencode_dist import (
    OPENCODE_1_15,
    OPENCODE_1_18,
    OpencodeInstallError,
    ensure_opencode,
)
from tests.e2e.opencode_server import OpencodeServer

E2E_DIR = Path(__file__).resolve().parent
DEFAULT_DELAY_S = 0.3
DEFAULT_TITLE_DELAY_S = 0.05
_started_servers: list[OpencodeServer] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/e2e as ``e2e`` and ``slow``."""
    for item in items:
        if E2E_DIR in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def fake_llm_server() -> Iterator[FakeLLM]:
    """The one fake LLM every opencode of the session talks to."""
    server = FakeLLM(delay_s=DEFAULT_DELAY_S, title_delay_s=DEFAULT_TITLE_DELAY_S).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def fake_llm(fake_llm_server: FakeLLM) -> FakeLLM:
    """The fake LLM with default timings and no records."""
    fake_llm_server.delay_s = DEFAULT_DELAY_S
    fake_llm_server.title_delay_s = DEFAULT_TITLE_DELAY_S
    fake_llm_server.reset()
    return fake_llm_server


def _serve(
    version: str, tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM
) -> Iterator[OpencodeServer]:
    binary: Path | None = None
    problem = ""
    try:
        binary = ensure_opencode(version)
    except OpencodeInstallError as exc:
        problem = str(exc)
    if binary is None:  # fail, never skip: the e2e tests are part of the suite
        pytest.fail(f"cannot install opencode {version}: {problem}", pytrace=False)
    state = tmp_path_factory.mktemp(f"opencode-{version}")
    server = OpencodeServer(binary, version=version, state_dir=state, llm_base_url=llm.base_url)
    _started_servers.append(server)
    try:
        server.start()
        yield server
    finally:
        server.close()
        _started_servers.remove(server)


@pytest.fixture(scope="session")
def opencode_1_18(
    tmp_path_factory: pytest.TempPathFactory, fake_llm_server: FakeLLM
) -> Iterator[OpencodeServer]:
    """opencode 1.18.33 (routes /session/<id>/... to the session's own directory)."""
    yield from _serve(OPENCODE_1_18, tmp_path_factory, fake_llm_server)


@pytest.fixture(scope="session")
def opencode_1_15(
    tmp_path_factory: pytest.TempPathFactory, fake_llm_server: FakeLLM
) -> Iterator[OpencodeServer]:
    """opencode 1.15.4 (still runs parallel turns for prompts with different directories)."""
    yield from _serve(OPENCODE_1_15, tmp_path_factory, fake_llm_server)


@pytest.fixture(params=[OPENCODE_1_18, OPENCODE_1_15], ids=lambda v: f"opencode-{v}")
def opencode_any(request: pytest.FixtureRequest) -> OpencodeServer:
    """Each pinned opencode in turn."""
    name = {OPENCODE_1_18: "opencode_1_18", OPENCODE_1_15: "opencode_1_15"}[request.param]
    server = request.getfixturevalue(name)
    assert isinstance(server, OpencodeServer)
    return server


@pytest.fixture(autouse=True)
def _restart_stopped_opencode() -> Iterator[None]:
    """A test that stopped a shared opencode and failed to start it again leaves it running."""
    yield
    for server in _started_servers:
        if not server.running:
            server.start()


@pytest.fixture
def pigeond(tmp_path: Path) -> Iterator[DaemonFactory]:
    """Starts pigeond subprocesses (``factory.start(db, opencode_url=...)``) for one test."""
    factory = DaemonFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()
