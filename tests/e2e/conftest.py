"""Fixtures for the end-to-end tests: the real opencode, offline, with a fake LLM.

* ``fake_llm``: the session's :class:`FakeLLM`, reset (records, maxima,
  ``delay_s``, ``echo_swarm`` off) before every test.
* ``opencode_1_18`` / ``opencode_1_15``: one ``opencode serve`` per pinned
  version for the whole session (start-up takes seconds), installed on first
  use into the cache (see :mod:`testkit.opencode_dist`).
* ``opencode_any``: each test that uses it runs once per version.
* ``daemons`` (from tests/conftest.py): pigeond processes, stopped after the test.
* ``opencode_with_plugin``: opencode 1.18.33 with pigeond's plugin installed by
  ``pigeon install-plugin --global``, its tools pointed at ``plugin_pigeond_port``
  (where a test starts pigeond, or leaves nothing to show an outage) and at
  ``plugin_token_link`` for the token: a link to the token file of the test's
  pigeond, which holds a token even before (or without) a pigeond.
* ``opencode_1_15_with_plugin``: the same with opencode 1.15.4 (its tools call the same
  ``plugin_pigeond_port``), for tests that hold for both pinned versions.
* ``daemon``: the test's pigeond on ``plugin_pigeond_port``, delivering to
  ``opencode_with_plugin`` in turns.
* ``opencode_1_15_with_plugin``: the same with opencode 1.15.4.
* ``opencode_with_plugin_b``: a second such opencode, another host's, for tests of
  several daemons on one PostgreSQL: its tools call pigeond on ``plugin_pigeond_port_b``
  with the token ``plugin_token_link_b`` leads to (the test points it at its second
  daemon's token file).

Every test in this folder is marked ``e2e`` (and ``slow``, so ``make unit``
leaves them out).  A test may stop a shared opencode (an outage test); if it
leaves it stopped, it is started again before the next test.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess, client_token_file
from testkit.fake_llm import FakeLLM
from testkit.opencode_dist import (
    OPENCODE_1_15,
    OPENCODE_1_18,
    OpencodeInstallError,
    ensure_opencode,
)
from testkit.opencode_server import OpencodeServer, free_port
from tests.e2e.agents import start_pigeond

E2E_DIR = Path(__file__).resolve().parent
DEFAULT_DELAY_S = 0.3
DEFAULT_TITLE_DELAY_S = 0.05
PLUGIN_SEND_RETRY_S = 6
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
    fake_llm_server.echo_swarm = False
    fake_llm_server.reset()
    return fake_llm_server


def _serve(
    version: str,
    tmp_path_factory: pytest.TempPathFactory,
    llm: FakeLLM,
    extra_env: Mapping[str, str] | None = None,
    prepare: Callable[[OpencodeServer], None] | None = None,
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
    server = OpencodeServer(
        binary, version=version, state_dir=state, llm_base_url=llm.base_url, extra_env=extra_env
    )
    _started_servers.append(server)
    try:
        if prepare is not None:
            prepare(server)
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


@pytest.fixture(scope="session")
def plugin_pigeond_port() -> int:
    """The port the plugin's tools call pigeond on (free when the session starts)."""
    return free_port()


@pytest.fixture(scope="session")
def plugin_token_link(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin's PIGEOND_TOKEN_FILE: opencode's environment is fixed for the session,
    so this link is pointed at each test's pigeond token (see ``_plugin_token``)."""
    return tmp_path_factory.mktemp("plugin-token") / "token"


@pytest.fixture(autouse=True)
def _plugin_token(request: pytest.FixtureRequest) -> None:
    """For a test of the plugin (it uses ``plugin_pigeond_port``): the token file of the
    pigeond it may start (``DaemonProcess.token_file``), made now with a fresh token
    (pigeond keeps a token it finds), and the plugin's token link pointed at it.  So the
    tools read a token even while no pigeond runs, and reach an outage, not a missing file."""
    if "plugin_pigeond_port" not in request.fixturenames:
        return
    tmp_path: Path = request.getfixturevalue("tmp_path")
    link: Path = request.getfixturevalue("plugin_token_link")
    token_file = client_token_file(tmp_path / "home")
    token_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    link.unlink(missing_ok=True)
    link.symlink_to(token_file)


def _plugin_env(port: int, token_link: Path) -> dict[str, str]:
    """What an opencode with pigeond's plugin is started with: its tools call pigeond on
    ``port`` with the token behind ``token_link``."""
    return {
        "PIGEOND_URL": f"http://127.0.0.1:{port}",
        "PIGEOND_TOKEN_FILE": str(token_link),
        "PIGEOND_SEND_RETRY_S": str(PLUGIN_SEND_RETRY_S),
    }


def _install_plugin(server: OpencodeServer) -> None:
    """``pigeon install-plugin --global`` for opencode's isolated config folder."""
    env = {"XDG_CONFIG_HOME": str(server.iso / "config"), "PATH": "/usr/bin:/bin"}
    subprocess.run(
        [str(Path(sys.executable).parent / "pigeon"), "install-plugin", "--global"],
        env=env,
        check=True,
        capture_output=True,
        timeout=30,
    )


@pytest.fixture(scope="session")
def opencode_with_plugin(
    tmp_path_factory: pytest.TempPathFactory,
    fake_llm_server: FakeLLM,
    plugin_pigeond_port: int,
    plugin_token_link: Path,
) -> Iterator[OpencodeServer]:
    """opencode 1.18.33 whose sessions have the swarm_* tools of pigeond's plugin."""
    env = _plugin_env(plugin_pigeond_port, plugin_token_link)
    yield from _serve(OPENCODE_1_18, tmp_path_factory, fake_llm_server, env, _install_plugin)


@pytest.fixture(scope="session")
def opencode_1_15_with_plugin(
    tmp_path_factory: pytest.TempPathFactory,
    fake_llm_server: FakeLLM,
    plugin_pigeond_port: int,
    plugin_token_link: Path,
) -> Iterator[OpencodeServer]:
    """opencode 1.15.4 whose sessions have the swarm_* tools, calling ``plugin_pigeond_port``."""
    env = _plugin_env(plugin_pigeond_port, plugin_token_link)
    yield from _serve(OPENCODE_1_15, tmp_path_factory, fake_llm_server, env, _install_plugin)


@pytest.fixture
def daemon(
    daemons: DaemonFactory, tmp_path: Path, opencode_with_plugin: OpencodeServer,
    plugin_pigeond_port: int,
) -> DaemonProcess:  # fmt: skip
    """pigeond where ``opencode_with_plugin``'s tools call it, delivering to it in turns."""
    return start_pigeond(daemons, tmp_path, opencode_with_plugin, plugin_pigeond_port)


@pytest.fixture(scope="session")
def plugin_pigeond_port_b() -> int:
    """The port the tools of ``opencode_with_plugin_b`` call pigeond on."""
    return free_port()


@pytest.fixture(scope="session")
def plugin_token_link_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PIGEOND_TOKEN_FILE of ``opencode_with_plugin_b``: a link a test points at the
    token file of the pigeond beside that opencode."""
    return tmp_path_factory.mktemp("plugin-token-b") / "token"


@pytest.fixture(scope="session")
def opencode_with_plugin_b(
    tmp_path_factory: pytest.TempPathFactory,
    fake_llm_server: FakeLLM,
    plugin_pigeond_port_b: int,
    plugin_token_link_b: Path,
) -> Iterator[OpencodeServer]:
    """A second opencode 1.18.33 with pigeond's plugin (a second host): its tools call the
    pigeond on ``plugin_pigeond_port_b``; it shares the fake LLM, which tells sessions apart."""
    env = _plugin_env(plugin_pigeond_port_b, plugin_token_link_b)
    yield from _serve(OPENCODE_1_18, tmp_path_factory, fake_llm_server, env, _install_plugin)


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
