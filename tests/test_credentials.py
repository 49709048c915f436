"""The token file, private files, and how clients find the daemon and its token."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeond.credentials import (
    ADDRESS_SOURCES,
    DEFAULT_URL,
    TokenError,
    address_order,
    client_token,
    daemon_address,
    load_or_create_token,
    read_token,
)
from pigeond.service.systemd import InstanceLock
from pigeond.storage import open_database


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- the daemon's token ------------------------------------------------------------------


def test_token_is_created_private_and_long(tmp_path: Path) -> None:
    """The first start makes a 0600 file with at least 32 random bytes (43 URL-safe chars)."""
    path = tmp_path / "new" / "token"
    token, loosened = load_or_create_token(path)
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    assert len(token) >= 43 and not loosened
    assert path.read_text().strip() == token


def test_token_is_reused(tmp_path: Path) -> None:
    """A later start reads the same token instead of making a new one."""
    first, _ = load_or_create_token(tmp_path / "token")
    again, _ = load_or_create_token(tmp_path / "token")
    assert first == again


def test_tokens_differ_between_daemons(tmp_path: Path) -> None:
    """Two token files never hold the same token."""
    assert load_or_create_token(tmp_path / "a")[0] != load_or_create_token(tmp_path / "b")[0]


def test_readable_token_file_is_made_private(tmp_path: Path) -> None:
    """A token file others could read is set back to 0600, and that is reported."""
    path = tmp_path / "token"
    load_or_create_token(path)
    path.chmod(0o644)
    _, loosened = load_or_create_token(path)
    assert loosened and mode(path) == 0o600


def test_short_token_is_refused(tmp_path: Path) -> None:
    """A file holding too short a secret is an error that says how to fix it."""
    path = tmp_path / "token"
    path.write_text("secret")
    with pytest.raises(TokenError, match="delete it and restart"):
        load_or_create_token(path)


# -- private files ---------------------------------------------------------------------


def test_database_files_and_folder_are_private(tmp_path: Path) -> None:
    """The database, its WAL and -shm files are 0600 and a new folder 0700."""
    db = tmp_path / "fresh" / "pigeond.db"
    conn = open_database(db)
    try:
        conn.execute("INSERT INTO swarm_sequences (name, value) VALUES ('probe', 0)")
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert mode(path) == 0o600, path
        assert mode(db.parent) == 0o700
    finally:
        conn.close()


def test_existing_open_database_is_made_private(tmp_path: Path) -> None:
    """A database an older pigeond left 0644 is tightened at start."""
    db = tmp_path / "pigeond.db"
    open_database(db).close()
    db.chmod(0o644)
    open_database(db).close()
    assert mode(db) == 0o600


def test_lock_file_is_private(tmp_path: Path) -> None:
    """The instance lock beside the database is 0600."""
    lock = InstanceLock(tmp_path / "x" / "pigeond.db")
    lock.acquire()
    try:
        assert mode(lock.path) == 0o600 and mode(lock.path.parent) == 0o700
    finally:
        lock.release()


# -- clients: the token ------------------------------------------------------------------


def test_client_token_prefers_the_variable(tmp_path: Path) -> None:
    """PIGEOND_TOKEN wins over any file."""
    assert client_token({"PIGEOND_TOKEN": "abc", "PIGEOND_TOKEN_FILE": "/nope"}) == "abc"


def test_client_token_without_any_is_none(tmp_path: Path) -> None:
    """No variable and no default file: no token (a Unix socket needs none)."""
    assert client_token({"HOME": str(tmp_path)}) is None


def test_client_token_reads_the_default_file(tmp_path: Path) -> None:
    """The default file is ``pigeond/token`` under XDG_STATE_HOME, where pigeond makes it."""
    token, _ = load_or_create_token(tmp_path / "pigeond" / "token")
    assert client_token({"XDG_STATE_HOME": str(tmp_path)}) == token
    assert read_token(tmp_path / "pigeond" / "token") == token


# -- clients: the address -------------------------------------------------------------------


@pytest.fixture
def runtime_dir(tmp_path: Path) -> Iterator[Path]:
    """An ``XDG_RUNTIME_DIR`` whose ``pigeond/pigeond.sock`` is a listening socket."""
    folder = tmp_path / "run"
    (folder / "pigeond").mkdir(parents=True, mode=0o700)
    (folder / "pigeond").chmod(0o700)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(folder / "pigeond" / "pigeond.sock"))
    sock.listen(1)
    yield folder
    sock.close()


def test_explicit_url_wins(runtime_dir: Path) -> None:
    """--url beats PIGEOND_URL and the socket."""
    env = {"PIGEOND_URL": "http://127.0.0.1:1", "XDG_RUNTIME_DIR": str(runtime_dir)}
    assert daemon_address("unix:/x", env).url == "unix:/x"
    assert daemon_address(None, env).url == "http://127.0.0.1:1"


def test_private_runtime_socket_is_preferred(runtime_dir: Path) -> None:
    """With no URL given, the user's socket in a 0700 folder of theirs is used."""
    address = daemon_address(None, {"XDG_RUNTIME_DIR": str(runtime_dir)}, system_socket="/nope")
    assert address.url == f"unix:{runtime_dir}/pigeond/pigeond.sock"


def test_runtime_socket_in_an_open_folder_is_ignored(runtime_dir: Path) -> None:
    """A socket in a folder others can enter may be anyone's: TCP is used instead."""
    (runtime_dir / "pigeond").chmod(0o755)
    address = daemon_address(None, {"XDG_RUNTIME_DIR": str(runtime_dir)}, system_socket="/nope")
    assert address.url == DEFAULT_URL


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give the folder to another user")
def test_runtime_socket_in_another_users_folder_is_ignored(runtime_dir: Path) -> None:
    """A folder owned by someone else is not the user's: TCP is used instead."""
    os.chown(runtime_dir / "pigeond", 65534, 65534)
    address = daemon_address(None, {"XDG_RUNTIME_DIR": str(runtime_dir)}, system_socket="/nope")
    assert address.url == DEFAULT_URL


def test_system_socket_is_next(runtime_dir: Path) -> None:
    """Without a user socket, the system service's socket is used when it is there."""
    system = runtime_dir / "pigeond" / "pigeond.sock"
    address = daemon_address(None, {}, system_socket=str(system))
    assert address.url == f"unix:{system}"


def test_the_order_the_help_says_is_the_order_tried(runtime_dir: Path, tmp_path: Path) -> None:
    """With every place available, each is taken until it is gone, in ADDRESS_SOURCES'
    order, which address_order() says in the same order."""
    system_folder = tmp_path / "system"
    system_folder.mkdir(mode=0o755)
    system = system_folder / "pigeond.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(system))
        env = {"PIGEOND_URL": "http://127.0.0.1:1", "XDG_RUNTIME_DIR": str(runtime_dir)}
        taken = []
        for gone in ("PIGEOND_URL", "XDG_RUNTIME_DIR"):
            taken.append(daemon_address(None, env, system_socket=str(system)).why)
            del env[gone]
        taken.append(daemon_address(None, env, system_socket=str(system)).why)
        system.unlink()
        taken.append(daemon_address(None, env, system_socket=str(system)).why)
    said = address_order()
    assert taken == [source.why for source in ADDRESS_SOURCES]
    assert said == ", else ".join(source.said for source in ADDRESS_SOURCES)
    assert [said.index(s.said) for s in ADDRESS_SOURCES] == sorted(
        said.index(s.said) for s in ADDRESS_SOURCES
    )
