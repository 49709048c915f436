"""Running ``python -m pigeond`` as a real subprocess for integration tests.

:class:`DaemonProcess` starts the daemon, waits for its ``listening on ...``
log line (the port is 0, so the line is the only way to learn it), and stops
it with SIGTERM (then SIGKILL) or kills it with SIGKILL to simulate a crash.
A background thread drains the daemon's stdout (stderr is merged into it) so
the pipe never fills and the daemon never blocks on a log write; the output
is kept for error messages.

:class:`DaemonFactory` starts any number of daemons for one test and kills
whatever is still running at teardown, so no test leaks a process.

The daemon runs with ``PIGEOND_CONFIG=""`` and ``HOME``/``XDG_*`` inside the
test's temporary directory, and every inherited ``PIGEOND_*`` variable
removed, so no user or system configuration is read.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pigeond.model import StoredMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.operator import open_existing
from testkit.polling import PATIENCE_S, wait_until

LISTENING_RE = re.compile(r"pigeond\.service\.daemon: listening on (\S+)")
# bounds on a start (to its "listening on" line) and a clean stop on a loaded machine
DEFAULT_START_TIMEOUT_S = PATIENCE_S
DEFAULT_STOP_TIMEOUT_S = PATIENCE_S


def isolated_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a pigeond (or pigeon-send) child: no user config, no stray settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIGEOND_", "XDG_", "OPENCODE_")) and k != "STATE_DIRECTORY"
    }
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "PIGEOND_CONFIG": "",
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if extra:
        env.update(extra)
    return env


def client_token_file(home: Path) -> Path:
    """Where a client run with ``isolated_env(home)`` looks for the token by default; test
    daemons keep their token there, so ``pigeon-send`` needs no flag, as for a user."""
    return home / ".local" / "state" / "pigeond" / "token"


def stop_process(proc: subprocess.Popen[Any], timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
    """SIGTERM and wait; SIGKILL if it does not exit within ``timeout_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)


class DaemonStartError(RuntimeError):
    """The daemon exited, or did not log its listening address, in time."""


# The fake opencode runs no turns and these tests check the per-call guard:
# one prompt per message, no waiting for turns (tests/e2e covers turns).
CALL_LEVEL_ARGS = ("--delivery", "call", "--batch-max", "1")
# For the load tests, whose numbered sends from one session to another ("sender 3 message
# 7") are just what the pair brakes hold (more than 30 a minute, or more than 16 alike
# within 10 minutes): the brakes off, so what such a test counts is delivered.
PAIR_BRAKES_OFF = ("--max-pair-messages-per-minute", "0", "--max-repeats-per-pair", "0")


def password_args(workdir: Path, password: str | None) -> list[str]:
    """``--opencode-password-file`` naming a file of ``workdir`` that only its owner may
    read (as pigeond requires), holding ``password``; none for None."""
    if password is None:
        return []
    path = workdir / "opencode-password"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(password + "\n")
    return ["--opencode-password-file", str(path)]


class DaemonProcess:
    """One ``pigeond`` subprocess; start it with :meth:`start`."""

    def __init__(
        self,
        workdir: Path,
        db: Path | str,
        *,
        opencode_url: str,
        listen: str = "tcp:0:interface=127.0.0.1",
        tick_ms: int = 50,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        nofile: tuple[int, int] | None = None,
        opencode_password: str | None = None,
    ) -> None:
        """``opencode_password``: kept in a private file of ``workdir`` and named with
        ``--opencode-password-file`` (an opencode 2.x, or its stand-in, asks for one)."""
        self.workdir = workdir
        self.nofile = nofile  # (soft, hard) RLIMIT_NOFILE to start with; None: inherited
        self.extra_env = dict(env or {})
        self.db = db
        self.token_file = client_token_file(workdir / "home")
        self.args: list[str] = [
            sys.executable,
            "-m",
            "pigeond",
            "--token-file",
            str(self.token_file),
            "--listen",
            listen,
            "--db",
            str(db),
            "--opencode-url",
            opencode_url,
            "--tick-ms",
            str(tick_ms),
            *CALL_LEVEL_ARGS,
            *password_args(workdir, opencode_password),
            *extra_args,
        ]
        self._proc: subprocess.Popen[str] | None = None
        self._drainer: threading.Thread | None = None
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._listening = threading.Event()
        self._address: str | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> DaemonProcess:
        """Spawn the daemon and wait for its listening line; DaemonStartError otherwise."""
        if self._proc is not None:
            raise RuntimeError("this DaemonProcess was already started; make a new one")
        self._proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=isolated_env(self.workdir / "home", self.extra_env),
            cwd=self.workdir,
            preexec_fn=self._set_limits if self.nofile is not None else None,
        )
        self._drainer = threading.Thread(target=self._drain, name="pigeond-stdout", daemon=True)
        self._drainer.start()
        deadline = time.monotonic() + timeout_s
        while not self._listening.wait(timeout=0.02):
            if self._proc.poll() is not None or time.monotonic() >= deadline:
                why = (
                    f"exited with code {self._proc.returncode}"
                    if self._proc.poll() is not None
                    else f"did not log 'listening on' within {timeout_s:g} s"
                )
                self.kill()
                raise DaemonStartError(
                    f"pigeond {why}\ncommand: {self.args}\n--- output ---\n{self.output()}"
                )
        return self

    def _set_limits(self) -> None:
        """In the child, before exec: the open-files limit the test asked for."""
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)

    def _drain(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for line in proc.stdout:
            with self._lock:
                self._lines.append(line)
            if not self._listening.is_set():
                match = LISTENING_RE.search(line)
                if match is not None:
                    self._address = match.group(1)
                    self._listening.set()

    def _finish(self) -> None:
        """After the process has exited: collect the rest of its output, close the pipe."""
        if self._drainer is not None:
            self._drainer.join(timeout=PATIENCE_S)
        if self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        proc = self._proc
        if proc is None:
            raise RuntimeError("the daemon was never started")
        stop_process(proc, timeout_s)
        self._finish()
        return proc.returncode

    def terminate(self) -> None:
        """SIGTERM without waiting: the daemon starts its clean stop."""
        if self._proc is None:
            raise RuntimeError("the daemon was never started")
        self._proc.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> int:
        """Wait for the daemon to exit by itself (no signal); its exit code."""
        if self._proc is None:
            raise RuntimeError("the daemon was never started")
        self._proc.wait(timeout=timeout_s)
        self._finish()
        return self._proc.returncode

    def kill(self) -> int:
        """SIGKILL (``kill -9``): a crash, with no chance to clean up. Returns the exit code."""
        proc = self._proc
        if proc is None:
            raise RuntimeError("the daemon was never started")
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEFAULT_STOP_TIMEOUT_S)
        self._finish()
        return proc.returncode

    def __enter__(self) -> DaemonProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        if self._proc is not None:
            self.stop()

    # -- what the tests read ---------------------------------------------------

    @property
    def started(self) -> bool:
        return self._proc is not None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("the daemon was never started")
        return self._proc.pid

    @property
    def address(self) -> str:
        """What the daemon logged: ``tcp:127.0.0.1:PORT`` or ``unix:/path``."""
        if self._address is None:
            raise RuntimeError("the daemon has not logged a listening address")
        return self._address

    @property
    def port(self) -> int:
        if not self.address.startswith("tcp:"):
            raise RuntimeError(f"the daemon is not on TCP: {self.address}")
        return int(self.address.rsplit(":", 1)[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` for a TCP daemon."""
        host = self.address.split(":")[1]
        if host != "127.0.0.1":
            raise RuntimeError(f"the daemon listens on {host}, not 127.0.0.1")
        return f"http://127.0.0.1:{self.port}"

    @property
    def unix_path(self) -> str:
        if not self.address.startswith("unix:"):
            raise RuntimeError(f"the daemon is not on a Unix socket: {self.address}")
        return self.address[len("unix:") :]

    @property
    def token(self) -> str:
        """The bearer token the daemon made at its first start."""
        return self.token_file.read_text(encoding="ascii").strip()

    @property
    def auth_headers(self) -> dict[str, str]:
        """What a TCP client sends besides its request: the token, and JSON as the body type."""
        return {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}

    def request_json(
        self, method: str, path: str, body: Any = None, timeout_s: float = PATIENCE_S
    ) -> tuple[int, Any]:
        """One request over TCP with the token; the status and the decoded JSON answer."""
        request = urllib.request.Request(
            self.base_url + path,
            data=None if body is None else json.dumps(body).encode(),
            headers=self.auth_headers,
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def stored_messages(self) -> list[StoredMessage]:
        """Every message in the daemon's database, newest first (read as ``pigeon`` does)."""
        repo = SwarmRepository(open_existing(str(self.db)))
        try:
            return repo.list_messages(limit=1000)
        finally:
            repo.close()

    def join_in_database(self, channel: str, *sessions: str) -> None:
        """Make ``sessions`` members of ``channel`` in the daemon's database, as an operator's
        tool may (over HTTP only each session itself or a person may: api/authority.py)."""
        repo = SwarmRepository(open_existing(str(self.db)))
        try:
            for session in sessions:
                repo.join_channel(channel, session, int(time.time() * 1000), 1000)
        finally:
            repo.close()

    def cpu_s(self) -> float:
        """The CPU time (user and system, every thread) the daemon has used so far."""
        stat = Path(f"/proc/{self.pid}/stat").read_text(encoding="ascii")
        fields = stat.rsplit(")", 1)[1].split()  # from field 3 on: the name may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wait_idle(self, window_s: float = 1.0, busy_s: float = 0.05) -> None:
        """Wait until the daemon uses less than ``busy_s`` of CPU over ``window_s``: whatever
        it was going to do with what it was sent, it has done.  (Idle, its timers take a
        few ms a second; at work, it gets several times ``busy_s`` even from a machine with
        a dozen processes wanting each of its cores.)"""

        def quiet() -> bool:
            before = self.cpu_s()
            time.sleep(window_s)
            return self.cpu_s() - before < busy_s

        wait_until(quiet, PATIENCE_S, "pigeond to go idle", every_s=0)

    def output(self) -> str:
        """Everything the daemon wrote so far (stdout and stderr)."""
        with self._lock:
            return "".join(self._lines)


class DaemonFactory:
    """Starts daemons for one test; :meth:`close` kills whatever is still running."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self._started: list[DaemonProcess] = []

    def start(
        self,
        db: Path | str,
        *,
        opencode_url: str,
        listen: str = "tcp:0:interface=127.0.0.1",
        tick_ms: int = 50,
        extra_args: Sequence[str] = (),
        timeout_s: float = DEFAULT_START_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
        nofile: tuple[int, int] | None = None,
        opencode_password: str | None = None,
    ) -> DaemonProcess:
        daemon = DaemonProcess(
            self.tmp_path,
            db,
            opencode_url=opencode_url,
            listen=listen,
            tick_ms=tick_ms,
            extra_args=extra_args,
            env=env,
            nofile=nofile,
            opencode_password=opencode_password,
        )
        self._started.append(daemon)
        return daemon.start(timeout_s)

    def close(self) -> None:
        """Stop every daemon still running (SIGTERM, then SIGKILL) and close its pipe."""
        for daemon in self._started:
            if daemon.started:
                daemon.stop()
