"""The trust boundary on a real pigeond: the token over TCP, private files, peers by uid."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess
from tests import unix_http

pytestmark = pytest.mark.slow

SEND = {"from": "ses_sender", "to": "ses_target", "payload": "hi"}
OTHER_UID = 65534  # nobody

# Runs as another user, who may not read this checkout, with tests/unix_http.py copied
# beside the socket: POST one message over the socket, print the status (and the error).
UNIX_SEND = """
import json, sys
from unix_http import UnixHTTPConnection
conn = UnixHTTPConnection(sys.argv[1])
body = json.dumps({"from": "ses_nobody", "to": "ses_target", "payload": "from another user"})
conn.request("POST", "/swarm/send", body, {"content-type": "application/json"})
answer = conn.getresponse()
print(answer.status, json.loads(answer.read())["error"] if answer.status != 202 else "")
"""


def post(daemon: DaemonProcess, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        daemon.base_url + "/swarm/send",
        data=json.dumps(SEND).encode(),
        headers=headers,
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_tcp_send_needs_the_token(daemons: DaemonFactory, tmp_path: Path) -> None:
    """Over real TCP, no token is 401 and the daemon's token is 202."""
    daemon = daemons.start(tmp_path / "state" / "p.db", opencode_url="")
    status, body = post(daemon, {"Content-Type": "application/json"})
    assert status == 401, body
    assert post(daemon, daemon.auth_headers)[0] == 202
    assert daemon.token not in daemon.output(), "the token must never be logged"


def test_token_is_made_once_beside_the_database(daemons: DaemonFactory, tmp_path: Path) -> None:
    """Without token_file, the token is ``token`` beside the db, 0600, the same after a restart."""
    db = tmp_path / "state" / "p.db"
    token_file = db.parent / "token"
    first = daemons.start(db, opencode_url="", extra_args=["--token-file", str(token_file)])
    token = token_file.read_text()
    first.stop()
    daemons.start(db, opencode_url="", extra_args=["--token-file", str(token_file)])
    assert token_file.read_text() == token
    assert mode(token_file) == 0o600


def test_default_token_file_is_beside_the_database(tmp_path: Path) -> None:
    """``--check-config`` shows the default token_file: ``token`` in the db's folder."""
    db = tmp_path / "some" / "p.db"
    out = subprocess.run(
        [sys.executable, "-m", "pigeond", "--db", str(db), "--check-config"],
        capture_output=True, text=True, timeout=30,
        env={"PIGEOND_CONFIG": "", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f'token_file = "{db.parent / "token"}"' in out.stdout


def test_every_file_the_daemon_makes_is_private(daemons: DaemonFactory, tmp_path: Path) -> None:
    """Database, WAL, shm, lock and token are 0600 and the folder it made 0700."""
    db = tmp_path / "fresh" / "p.db"
    daemon = daemons.start(db, opencode_url="")
    post(daemon, daemon.auth_headers)
    made = [db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}.lock"), daemon.token_file]
    assert {str(p): oct(mode(p)) for p in made} == {str(p): oct(0o600) for p in made}
    assert mode(db.parent) == 0o700


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A short folder every user may enter (pytest's own are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="pgacc", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def send_as(uid: int, socket_path: Path) -> str:
    """Run a client as ``uid`` (setpriv) against the socket; its status line."""
    shutil.copy(unix_http.__file__, socket_path.parent)
    out = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
         "/usr/bin/python3", "-c", UNIX_SEND, str(socket_path)],
        cwd=socket_path.parent, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_another_user_on_an_open_unix_socket_is_403(
    daemons: DaemonFactory, tmp_path: Path, shared_dir: Path
) -> None:
    """Even on a socket with mode 666, a peer of another uid is refused by SO_PEERCRED."""
    path = shared_dir / "p.sock"
    daemon = daemons.start(tmp_path / "p.db", opencode_url="", listen=f"unix:{path}:mode=666")
    answer = send_as(OTHER_UID, path)
    assert answer.startswith("403") and f"uid {OTHER_UID}" in answer
    assert daemon.stored_messages() == []


def test_allowed_uid_on_a_unix_socket_may_send(
    daemons: DaemonFactory, tmp_path: Path, shared_dir: Path
) -> None:
    """A uid in allow_uids sends over the socket without any token."""
    path = shared_dir / "p.sock"
    daemon = daemons.start(
        tmp_path / "p.db", opencode_url="", listen=f"unix:{path}:mode=666",
        extra_args=["--allow-uids", str(OTHER_UID)],
    )  # fmt: skip
    assert send_as(OTHER_UID, path) == "202"
    assert [m.from_session for m in daemon.stored_messages()] == ["ses_nobody"]
