"""``pigeon`` and ``pigeon-tui`` with no database named and none of the user's own: the
system service's, when they may read it; else one line saying it is there and needs root
(or sudo), never "no such database file" about the user's ``~/.local/state``.

The user runs as ``nobody`` (file permissions bind it); the service's database is the
test's, passed as ``system_db``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeond.storage import SwarmRepository, open_database
from tests.unprivileged import needs_root, open_folder, run_as_nobody

pytestmark = needs_root

CLIS = {"pigeon": ["ls"], "pigeon-tui": []}


@pytest.fixture
def folder() -> Iterator[Path]:
    with open_folder() as top:
        yield top


def service_database(folder: Path, *, folder_mode: int, file_mode: int) -> Path:
    """A real pigeond database (root's) in a folder of its own with those modes."""
    state = folder / "lib"
    state.mkdir()
    path = state / "pigeond.db"
    SwarmRepository(open_database(path)).close()
    path.chmod(file_mode)
    state.chmod(folder_mode)
    return path


def needs_root_line(prog: str, system_db: Path, home: Path) -> str:
    own = home / ".local" / "state" / "pigeond" / "pigeond.db"
    return (
        f"{prog}: the service's database is {system_db} and needs root (or sudo): run this"
        f" with sudo, or name a database with --db (you have none of your own at {own})\n"
    )


@pytest.mark.parametrize("cli", list(CLIS))
def test_an_unreadable_service_database_is_said_to_need_root(folder: Path, cli: str) -> None:
    """The service's database is there but only its owner may read it (mode 0600)."""
    system_db = service_database(folder, folder_mode=0o755, file_mode=0o600)
    done = run_as_nobody(cli, CLIS[cli], folder, paths={"system_db": str(system_db)})
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == needs_root_line(cli, system_db, folder)


@pytest.mark.parametrize("cli", list(CLIS))
def test_a_service_database_behind_its_closed_folder_is_said_to_need_root(
    folder: Path, cli: str
) -> None:
    """The service's state folder is closed to the user (StateDirectoryMode=0700)."""
    system_db = service_database(folder, folder_mode=0o700, file_mode=0o600)
    done = run_as_nobody(cli, CLIS[cli], folder, paths={"system_db": str(system_db)})
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == needs_root_line(cli, system_db, folder)


def test_with_no_service_database_the_users_own_is_named(folder: Path) -> None:
    """No service database at all: the error is about the user's own, as before."""
    absent = folder / "lib" / "pigeond.db"
    done = run_as_nobody("pigeon", ["ls"], folder, paths={"system_db": str(absent)})
    own = folder / ".local" / "state" / "pigeond" / "pigeond.db"
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"pigeon: {own}: no such database file")
