"""pigeond as systemd runs it: notify protocol, watchdog, reload, socket activation, one
instance per database.  systemd is not PID 1 here, so the test plays its part: it binds the
AF_UNIX datagram socket named in NOTIFY_SOCKET and passes listening sockets the systemd way.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess, isolated_env
from tests.unix_http import unix_get

pytestmark = pytest.mark.slow


class NotifySocket:
    """The systemd side of sd_notify: a datagram socket collecting what pigeond says."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.received: list[tuple[float, str]] = []

    def wait_for(self, state: str, timeout_s: float = 15) -> float:
        """Block until a datagram holding ``state`` arrives; return when it arrived."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for at, message in self.received:
                if state in message.splitlines():
                    return at
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                break
            self.received.append((time.monotonic(), data.decode()))
        raise AssertionError(f"no {state!r} within {timeout_s} s; got {self.received}")

    def count(self, state: str) -> int:
        return sum(1 for _, m in self.received if state in m.splitlines())

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                self.received.append((time.monotonic(), self.sock.recv(4096).decode()))
            except TimeoutError:
                return


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[NotifySocket]:
    sock = NotifySocket(tmp_path / "notify.sock")
    yield sock
    sock.sock.close()


def health(base_url: str) -> dict[str, object]:
    with urllib.request.urlopen(base_url + "/health", timeout=5) as response:
        return dict(json.loads(response.read()))


def send(proc: DaemonProcess, payload: str) -> str:
    """POST /swarm/send over TCP, with the daemon's bearer token."""
    body = json.dumps({"from": "ses_a", "to": "ses_b", "payload": payload}).encode()
    headers = proc.auth_headers
    request = urllib.request.Request(
        proc.base_url + "/swarm/send", data=body, method="POST", headers=headers
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return str(json.loads(response.read())["msg_id"])


def start(daemons: DaemonFactory, notify: NotifySocket, *args: str, **env: str) -> DaemonProcess:
    return daemons.start(
        daemons.tmp_path / "p.db", opencode_url="", extra_args=args,
        env={"NOTIFY_SOCKET": str(notify.path), **env},
    )  # fmt: skip


def test_ready_after_the_port_answers_then_stopping(
    tmp_path: Path, notify: NotifySocket, daemons: DaemonFactory
) -> None:
    """READY=1 comes once the port answers; SIGTERM sends STOPPING=1, exits 0, keeps data."""
    proc = start(daemons, notify)
    notify.wait_for("READY=1")
    assert health(proc.base_url)["ok"] is True
    status = notify.wait_for("STATUS=queued 0, failed 0, delivery off")
    assert status > 0
    sent = [send(proc, f"m{i}") for i in range(3)]
    assert proc.stop() == 0
    notify.wait_for("STOPPING=1")
    conn = sqlite3.connect(tmp_path / "p.db")
    stored = {r[0] for r in conn.execute("SELECT msg_id FROM swarm_messages")}
    conn.close()
    assert set(sent) <= stored


def test_ready_is_not_sent_when_listening_fails(
    tmp_path: Path, notify: NotifySocket, daemons: DaemonFactory
) -> None:
    """A daemon that cannot bind its port never says READY=1 and exits non-zero."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    env = isolated_env(tmp_path / "home", {"NOTIFY_SOCKET": str(notify.path)})
    result = subprocess.run(
        [sys.executable, "-m", "pigeond", "--listen", f"tcp:{port}:interface=127.0.0.1",
         "--db", str(tmp_path / "p.db"), "--opencode-url", ""],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    blocker.close()
    notify.drain(0.2)
    assert result.returncode == 1 and "cannot listen" in result.stderr
    assert notify.count("READY=1") == 0


def test_watchdog_pings_at_half_the_period(
    tmp_path: Path, notify: NotifySocket, daemons: DaemonFactory
) -> None:
    """With WATCHDOG_USEC set for us, WATCHDOG=1 arrives about every half period."""
    start(daemons, notify, WATCHDOG_USEC="1000000", WATCHDOG_PID="")
    notify.wait_for("READY=1")
    notify.drain(2.2)
    pings = notify.count("WATCHDOG=1")
    assert 3 <= pings <= 7, notify.received


def test_no_watchdog_for_another_pid(
    tmp_path: Path, notify: NotifySocket, daemons: DaemonFactory
) -> None:
    """WATCHDOG_PID naming another process means the watchdog is not ours."""
    start(daemons, notify, WATCHDOG_USEC="200000", WATCHDOG_PID="1")
    notify.wait_for("READY=1")
    notify.drain(1.0)
    assert notify.count("WATCHDOG=1") == 0


def test_sighup_reloads_and_names_what_needs_a_restart(
    tmp_path: Path, notify: NotifySocket, daemons: DaemonFactory
) -> None:
    """SIGHUP re-reads the config: RELOADING=1, live settings applied, READY=1; options
    that cannot change live are named in the log."""
    config = tmp_path / "pigeond.toml"
    config.write_text("max_body_bytes = 65536\n")
    proc = start(daemons, notify, "--config", str(config))
    notify.wait_for("READY=1")
    assert send(proc, "x" * 3000)
    config.write_text('max_body_bytes = 2048\nlog_format = "json"\n')
    os.kill(proc.pid, signal.SIGHUP)
    notify.wait_for("RELOADING=1")
    deadline = time.monotonic() + 10
    while "reload: " not in proc.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    [line] = [line for line in proc.output().splitlines() if "reload: " in line]
    assert line.endswith(
        "reload: applied max_body_bytes: 65536 -> 2048; needs a restart, running as before"
        ' until then: log_format: "text" -> "json"'
    )
    assert line.startswith("warn ")
    notify.drain(0.2)
    assert notify.count("READY=1") == 2
    with pytest.raises(urllib.error.HTTPError) as too_big:
        send(proc, "x" * 3000)
    assert too_big.value.code == 413


def test_bad_config_on_reload_keeps_running(
    tmp_path: Path, notify: NotifySocket, daemons: DaemonFactory
) -> None:
    """A broken config file on SIGHUP is refused with a log line; the daemon keeps serving."""
    config = tmp_path / "pigeond.toml"
    config.write_text('listen = "tcp:0:interface=127.0.0.1"\n')
    proc = start(daemons, notify, "--config", str(config))
    notify.wait_for("READY=1")
    config.write_text("tick_ms = 'fast'\n")
    os.kill(proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "reload refused" not in proc.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "reload refused" in proc.output()
    assert health(proc.base_url)["ok"] is True


def test_second_instance_on_the_same_database_exits_1(
    tmp_path: Path, notify: NotifySocket, daemons: DaemonFactory
) -> None:
    """A second pigeond on the same database exits 1 at once, naming the holder's pid."""
    first = start(daemons, notify)
    env = isolated_env(tmp_path / "home")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pigeond", "--listen", "tcp:0:interface=127.0.0.1",
         "--db", str(tmp_path / "p.db"), "--opencode-url", ""],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"pigeond: another pigeond (pid {first.pid}) is using this database"
        f" (lock {tmp_path / 'p.db.lock'})"
    ]
    assert time.monotonic() - started < 10
    assert health(first.base_url)["ok"] is True


SHIM = """
import os, sys
os.dup2(int(sys.argv[1]), 3)
os.environ["LISTEN_FDS"] = "1"
os.environ["LISTEN_PID"] = str(os.getpid())
os.environ["LISTEN_FDNAMES"] = "pigeond.socket"
os.execv(sys.executable, [sys.executable, "-m", "pigeond", *sys.argv[2:]])
"""


@contextmanager
def activated(
    tmp_path: Path,
    notify: NotifySocket,
    listener: socket.socket,
    domain: str,
    prefix: Sequence[str] = (),
) -> Iterator[None]:
    """pigeond started the way systemd starts it, adopting ``listener`` as fd 3 (run through
    ``prefix``, e.g. setpriv); READY=1 has arrived when the block runs, and pigeond must
    exit 0 on SIGTERM after it."""
    env = isolated_env(tmp_path / "home", {"NOTIFY_SOCKET": str(notify.path)})
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-c", SHIM, str(listener.fileno()),
         "--listen", f"systemd:domain={domain}:index=0", "--db", str(tmp_path / "p.db"),
         "--opencode-url", ""],
        env=env, pass_fds=(listener.fileno(),), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    listener.close()
    try:
        notify.wait_for("READY=1")
        yield
    finally:
        proc.terminate()
        assert proc.wait(timeout=15) == 0, proc.stderr.read() if proc.stderr else ""


def test_socket_activation(tmp_path: Path, notify: NotifySocket) -> None:
    """A listening socket passed as fd 3 with LISTEN_FDS/LISTEN_PID is served."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    with activated(tmp_path, notify, listener, "INET"):
        assert health(f"http://127.0.0.1:{port}")["ok"] is True


def test_unix_socket_activation(tmp_path: Path, notify: NotifySocket) -> None:
    """A listening Unix socket passed as fd 3 (systemd:domain=UNIX) is served."""
    path = tmp_path / "p.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    with activated(tmp_path, notify, listener, "UNIX"):
        answer = unix_get(path, "/health")
        assert answer.startswith(b"HTTP/1.0 200") and b'"ok": true' in answer


def test_unix_socket_activation_never_chmods_or_removes_the_socket(
    tmp_path: Path, notify: NotifySocket
) -> None:
    """A passed Unix socket pigeond may not chmod (another uid's file, and as root
    CAP_FOWNER dropped, as under the system unit) is served; after pigeond stops, its file
    is there with mode 0640 and systemd's copy still listens."""
    path = tmp_path / "run" / "pigeond.sock"
    path.parent.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    os.chmod(path, 0o640)
    prefix: list[str] = []
    if os.geteuid() == 0:
        # systemd's socket file belongs to root; pigeond runs as pigeond. Here: the file
        # belongs to nobody, and pigeond runs as root without the right to chmod it.
        os.chown(path, 65534, 65534)
        prefix = ["setpriv", "--bounding-set=-fowner", "--"]
    owner = os.lstat(path).st_uid
    systemd_copy = listener.dup()  # systemd keeps the socket while pigeond comes and goes
    try:
        with activated(tmp_path, notify, listener, "UNIX", prefix):
            answer = unix_get(path, "/health")
            assert answer.startswith(b"HTTP/1.0 200") and b'"ok": true' in answer
            assert stat.S_IMODE(os.lstat(path).st_mode) == 0o640
        after = os.lstat(path)  # pigeond has exited 0
        assert stat.S_ISSOCK(after.st_mode)
        assert (stat.S_IMODE(after.st_mode), after.st_uid) == (0o640, owner)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))  # no shutdown() by pigeond: it waits for the next one
    finally:
        systemd_copy.close()


def test_socket_activation_without_a_socket_is_a_clear_error(tmp_path: Path) -> None:
    """Started by hand with a systemd: endpoint, pigeond says what is missing (exit 2);
    --check-config still accepts the setting."""
    env = isolated_env(tmp_path / "home")
    command = [sys.executable, "-m", "pigeond", "--listen", "systemd:domain=INET:index=0",
               "--db", str(tmp_path / "p.db")]  # fmt: skip
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 2 and "needs a socket passed by systemd" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    check = subprocess.run(
        [*command, "--check-config"], env=env, capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0 and 'listen = "systemd:domain=INET:index=0"' in check.stdout
