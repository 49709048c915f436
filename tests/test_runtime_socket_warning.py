"""Without ``$XDG_RUNTIME_DIR`` (a root shell, a container, ssh without logind) pigeond has
no runtime socket; it says so at start, in one warning naming the ways to get one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pigeond.config import Config
from pigeond.service.main import build_parser, runtime_socket_chosen
from pigeond.service.parts import runtime_socket_warning
from testkit.daemon_process import DaemonFactory
from testkit.polling import wait_until

NO_RUNTIME_DIR: dict[str, str] = {"HOME": "/root"}
WARNING = (
    "no Unix socket: XDG_RUNTIME_DIR is not set (a root shell, a container, ssh without"
    " logind?), so runtime_socket has no default and clients need TCP and the token; set"
    " runtime_socket (--runtime-socket, PIGEOND_RUNTIME_SOCKET) to a socket path, or"
    " XDG_RUNTIME_DIR, to get one"
)


def test_no_runtime_dir_and_no_choice_is_warned() -> None:
    """No $XDG_RUNTIME_DIR, runtime_socket left to its default: the warning says how to get one."""
    assert runtime_socket_warning(Config(), NO_RUNTIME_DIR, chosen=False) == WARNING


def test_a_runtime_socket_set_to_none_on_purpose_is_not_warned() -> None:
    """runtime_socket = "" set by the operator is a choice, not a missing default."""
    assert runtime_socket_warning(Config(), NO_RUNTIME_DIR, chosen=True) is None


def test_a_runtime_dir_gives_a_socket_and_no_warning() -> None:
    """With $XDG_RUNTIME_DIR the default socket is there: nothing to say."""
    config = Config(runtime_socket="/run/user/1000/pigeond/pigeond.sock")
    env = {"XDG_RUNTIME_DIR": "/run/user/1000"}
    assert runtime_socket_warning(config, env, chosen=False) is None


@pytest.mark.parametrize("listen", ["unix:/tmp/p.sock", "systemd:domain=UNIX:index=0"])
def test_a_unix_listen_socket_needs_no_runtime_socket(listen: str) -> None:
    """Listening on a Unix socket already gives clients one."""
    assert runtime_socket_warning(Config(listen=listen), NO_RUNTIME_DIR, chosen=False) is None


# logged once listening is done (delivery's start comes after the runtime socket's line)
STARTED = "arbiter NOT started: opencode_url is empty"


def warnings_in(output: str) -> list[str]:
    return [line for line in output.splitlines() if "no Unix socket" in line]


@pytest.mark.slow
def test_a_daemon_without_runtime_dir_warns_once_at_start(
    tmp_path: Path, daemons: DaemonFactory
) -> None:
    """Started without $XDG_RUNTIME_DIR (as the test daemons are), one warning line says it."""
    daemon = daemons.start(tmp_path / "p.db", opencode_url="")
    wait_until(lambda: STARTED in daemon.output(), 10, "the start to end")
    [line] = warnings_in(daemon.output())
    assert line == "warn pigeond.service.main: " + WARNING


@pytest.mark.slow
def test_a_daemon_with_runtime_dir_listens_there_and_does_not_warn(
    tmp_path: Path, daemons: DaemonFactory
) -> None:
    """With $XDG_RUNTIME_DIR it listens on its runtime socket, and says nothing of one."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    daemon = daemons.start(
        tmp_path / "p.db", opencode_url="", env={"XDG_RUNTIME_DIR": str(runtime)}
    )
    socket = runtime / "pigeond" / "pigeond.sock"
    wait_until(lambda: STARTED in daemon.output(), 10, "the start to end")
    assert f"also listening on unix:{socket} (runtime socket)" in daemon.output()
    assert warnings_in(daemon.output()) == []
    assert os.path.exists(socket)


@pytest.mark.parametrize(
    ("flags", "env", "file", "chosen"),
    [
        ([], {}, "", False),
        ([], {}, "tick_ms = 100\n", False),
        (["--runtime-socket", ""], {}, "", True),
        ([], {"PIGEOND_RUNTIME_SOCKET": ""}, "", True),
        ([], {}, 'runtime_socket = ""\n', True),
    ],
    ids=["default", "file-without-it", "flag", "variable", "file"],
)
def test_runtime_socket_set_by_any_source_counts_as_chosen(
    tmp_path: Path, flags: list[str], env: dict[str, str], file: str, chosen: bool
) -> None:
    """A flag, a PIGEOND_ variable or the config file setting runtime_socket (to anything,
    none included) is a choice; only a runtime_socket left to its default is not."""
    config_file = None
    if file:
        path = tmp_path / "pigeond.toml"
        path.write_text(file)
        config_file = str(path)
    args = build_parser().parse_args(flags)
    assert runtime_socket_chosen(args, env, Config(config_file=config_file)) is chosen
