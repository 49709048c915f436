"""A daemon socket the caller may not use: every CLI that calls the daemon says whose
socket it is and what to do (join its group, log in again), in one line, exit 3; it
does not retry, and it does not pass for an unreachable daemon."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import closed_port
from tests.unprivileged import needs_root, open_folder, run_as_nobody

pytestmark = needs_root

SESSION = "ses_sender01"
TARGET = "ses_target01"
OUTSIDERS = "owner root, group root"  # what the test's files are: nobody is in neither
JOIN = "you are not in group root: join it (sudo adduser nobody root) and log in again"


@pytest.fixture
def folder() -> Iterator[Path]:
    with open_folder() as top:
        yield top


def listening_socket(path: Path, mode: int) -> socket.socket:
    """A real listening Unix socket at ``path`` with ``mode`` (root's, group root)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(8)
    path.chmod(mode)
    return sock


def daemon_verbs(url: str) -> dict[str, tuple[str, list[str]]]:
    """Each CLI command that calls the daemon, given ``url``: (cli, argv)."""
    return {
        "pigeon-send": (
            "pigeon-send", ["--url", url, "--retry-for", "30", "--from", SESSION, TARGET, "x"]
        ),
        "pigeon send": ("pigeon", ["send", "--url", url, "--from", SESSION, TARGET, "x"]),
        "inbox": ("pigeon", ["inbox", "--session", SESSION, "--url", url]),
        "name set": ("pigeon", ["name", "set", "alpha", SESSION, "--url", url]),
        "name release": ("pigeon", ["name", "release", "alpha", "--url", url]),
        "channel join": ("pigeon", ["channel", "join", "ops", SESSION, "--url", url]),
        "channel leave": ("pigeon", ["channel", "leave", "ops", SESSION, "--url", url]),
    }  # fmt: skip


@pytest.mark.parametrize("verb", list(daemon_verbs("unix:/x")))
def test_a_socket_of_a_group_the_caller_is_not_in_is_said_with_the_fix(
    folder: Path, verb: str
) -> None:
    """connect() refused (EACCES): the socket, its owner, group and mode, and the fix."""
    path = folder / "pigeond.sock"
    with listening_socket(path, 0o660):
        cli, argv = daemon_verbs(f"unix:{path}")[verb]
        done = run_as_nobody(cli, argv, folder)
    prog = "pigeon-send" if cli == "pigeon-send" or argv[0] == "send" else "pigeon"
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr == (
        f"{prog}: {path} exists but is not open to you ({OUTSIDERS}, mode 0660): {JOIN}\n"
    )


def test_a_socket_of_its_owner_alone_is_not_said_to_be_a_group_matter(folder: Path) -> None:
    """A socket with no group access (mode 0600): joining a group would not help."""
    path = folder / "pigeond.sock"
    with listening_socket(path, 0o600):
        done = run_as_nobody("pigeon", ["inbox", "--session", SESSION, "--url", f"unix:{path}"],
                             folder)  # fmt: skip
    assert done.returncode == 3
    assert done.stderr == (
        f"pigeon: {path} exists but is not open to you ({OUTSIDERS}, mode 0600): only its"
        " owner may use it; is it another user's pigeond?\n"
    )


def test_a_system_socket_behind_the_services_folder_is_said_not_the_tcp_port(
    folder: Path,
) -> None:
    """The service's socket in a folder only its group may enter (RuntimeDirectoryMode=0750):
    the fallback to TCP finds nobody, and the error names the folder and the fix."""
    runtime = folder / "run"
    runtime.mkdir(mode=0o750)
    runtime.chmod(0o750)
    system = runtime / "pigeond.sock"
    default = f"http://127.0.0.1:{closed_port()}"
    argv = ["--from", SESSION, TARGET, "x"]
    with listening_socket(system, 0o660):
        done = run_as_nobody("pigeon-send", argv, folder, paths={"system_socket": str(system)},
                             default_url=default)  # fmt: skip
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr.startswith(
        f"pigeon-send: {system}: its folder {runtime} is not open to you ({OUTSIDERS},"
        f" mode 0750): {JOIN} (and daemon at {default} unreachable: "
    )
    assert done.stderr.endswith("; nothing was sent\n")
    assert done.stderr.count("\n") == 1  # no "trying again": the port is no way round
