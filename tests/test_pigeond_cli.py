"""The real ``pigeond`` entry point, run as a subprocess (``python -m pigeond``)."""

from __future__ import annotations

import os
import queue
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from pigeond import __version__

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 30.0
LISTEN_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 15.0
EPHEMERAL = "tcp:0:interface=127.0.0.1"
PASSWORD = "hunter2-Very-Secret-Pa55"


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """os.environ without pigeond/opencode/systemd settings, HOME and XDG dirs in tmp."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIGEOND_", "OPENCODE_", "XDG_")) and k != "STATE_DIRECTORY"
    }
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
        XDG_STATE_HOME=str(tmp_path / "xdg-state"),
        PIGEOND_CONFIG="",
    )
    env.update(extra)
    return env


def run_pigeond(args: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``python -m pigeond ARGS`` to completion (bounded) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "pigeond", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The process wrote exactly one non-empty line to stderr and no traceback."""
    assert "Traceback" not in result.stderr
    assert "Traceback" not in result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pigeond: ")
    return lines[0]


@dataclass
class RunningDaemon:
    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None]
    seen: list[str]

    def wait_for(self, needle: str, timeout: float = LISTEN_TIMEOUT_S) -> str:
        """The first stdout line containing needle; fails after timeout seconds or at EOF."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"no {needle!r} within {timeout} s; stdout so far: {self.seen}")
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                pytest.fail(f"stdout closed before {needle!r}; stdout: {self.seen}")
            self.seen.append(line)
            if needle in line:
                return line

    def terminate(self) -> int:
        """Send SIGTERM and return the exit code (bounded)."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=STOP_TIMEOUT_S)

    def stderr_text(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


def _pump(stream: Iterator[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


@pytest.fixture
def start_daemon() -> Iterator[list[RunningDaemon]]:
    """Start daemons via the list; any still running at teardown is killed."""
    started: list[RunningDaemon] = []
    yield started
    for daemon in started:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait(timeout=STOP_TIMEOUT_S)
        for stream in (daemon.proc.stdout, daemon.proc.stderr):
            if stream is not None:
                stream.close()


def spawn(
    started: list[RunningDaemon], args: Sequence[str], env: Mapping[str, str]
) -> RunningDaemon:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pigeond", *args],
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    daemon = RunningDaemon(proc, lines, [])
    started.append(daemon)
    return daemon


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pigeond.toml"
    path.write_text(text, encoding="utf-8")
    return path


# --- --version / --check-config ----------------------------------------------------


def test_version_prints_version_and_exits_0(tmp_path: Path) -> None:
    """`pigeond --version` prints 'pigeond <version>' and exits 0."""
    result = run_pigeond(["--version"], clean_env(tmp_path))
    assert result.returncode == 0
    assert result.stdout.strip() == f"pigeond {__version__}"


def test_check_config_prints_effective_values(tmp_path: Path) -> None:
    """--check-config exits 0 and prints flag values and defaults as TOML."""
    db = tmp_path / "x" / "p.db"
    result = run_pigeond(
        ["--check-config", "--tick-ms", "250", "--db", str(db)], clean_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    values = tomllib.loads(result.stdout)
    assert values["tick_ms"] == 250
    assert values["db"] == str(db)
    assert values["listen"] == "tcp:4097:interface=127.0.0.1"
    assert values["opencode_url"] == "http://127.0.0.1:4096"


def test_check_config_merges_flag_env_and_file(tmp_path: Path) -> None:
    """--check-config shows flag > PIGEOND_ variable > file > default in the real process."""
    cfg = write_config(tmp_path, 'tick_ms = 111\nmax_attempts = 7\nlisten = "tcp:1111"\n')
    env = clean_env(
        tmp_path, PIGEOND_CONFIG=str(cfg), PIGEOND_TICK_MS="222", PIGEOND_LISTEN="tcp:2"
    )
    result = run_pigeond(["--check-config", "--listen", "tcp:3333:interface=127.0.0.1"], env)
    assert result.returncode == 0, result.stderr
    values = tomllib.loads(result.stdout)
    assert values["listen"] == "tcp:3333:interface=127.0.0.1"
    assert values["tick_ms"] == 222
    assert values["max_attempts"] == 7
    assert values["max_body_bytes"] == 256 * 1024
    assert f"# config file: {cfg}" in result.stdout


def test_check_config_default_db_from_xdg_state_home(tmp_path: Path) -> None:
    """--check-config shows the db default under $XDG_STATE_HOME and creates nothing."""
    env = clean_env(tmp_path)
    result = run_pigeond(["--check-config"], env)
    assert result.returncode == 0, result.stderr
    expected = tmp_path / "xdg-state" / "pigeond" / "pigeond.db"
    assert tomllib.loads(result.stdout)["db"] == str(expected)
    assert not expected.parent.exists()


def test_check_config_reads_discovered_xdg_file(tmp_path: Path) -> None:
    """Without PIGEOND_CONFIG the $XDG_CONFIG_HOME/pigeond/pigeond.toml file is used."""
    cfg = tmp_path / "xdg-config" / "pigeond" / "pigeond.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("tick_ms = 4242\n", encoding="utf-8")
    env = clean_env(tmp_path)
    del env["PIGEOND_CONFIG"]
    result = run_pigeond(["--check-config"], env)
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(result.stdout)["tick_ms"] == 4242


SYSTEM_CONFIG = "/etc/pigeond/pigeond.toml"
PACKAGED_CONFIG = Path(__file__).resolve().parent.parent / "packaging" / "pigeond.toml"
# Run in a private mount namespace: /etc under a throw-away overlay that holds the
# packaged /etc/pigeond/pigeond.toml and a group pigeond, as the .deb leaves them. The
# host's /etc is never written.
WITH_PACKAGED_ETC = """
set -e
scratch=$1; packaged=$2; shift 2
mount -t tmpfs tmpfs "$scratch"
mkdir "$scratch/upper" "$scratch/work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$scratch/upper,workdir=$scratch/work" /etc
mkdir -p /etc/pigeond
cp "$packaged" /etc/pigeond/pigeond.toml
grep -q '^pigeond:' /etc/group || echo 'pigeond:x:64999:' >> /etc/group
exec "$@"
"""


def run_pigeond_with_packaged_etc(
    tmp_path: Path, args: Sequence[str], env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """``python -m pigeond ARGS`` on a machine whose /etc is as the .deb installs it."""
    scratch = tmp_path / "etc-overlay"
    scratch.mkdir()
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare.append("--map-root-user")
    command = [*unshare, "sh", "-c", WITH_PACKAGED_ETC, "sh", str(scratch)]
    command += [str(PACKAGED_CONFIG), sys.executable, "-m", "pigeond", *args]
    return subprocess.run(
        command,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_check_config_of_the_system_file_shows_the_service_database(tmp_path: Path) -> None:
    """Run by hand (root, no $STATE_DIRECTORY) on /etc/pigeond/pigeond.toml, --check-config
    shows the service's database, token, socket and peers, not the caller's ~/.local/state."""
    result = run_pigeond_with_packaged_etc(
        tmp_path, ["--config", SYSTEM_CONFIG, "--check-config"], clean_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"# config file: {SYSTEM_CONFIG}"
    assert lines[1].startswith("# defaults from: pigeond.service, as its packaged unit sets")
    values = tomllib.loads(result.stdout)
    assert values["db"] == "/var/lib/pigeond/pigeond.db"
    assert values["token_file"] == "/var/lib/pigeond/token"
    assert values["runtime_socket"] == "/run/pigeond/pigeond.sock"
    assert (values["allow_group"], values["allow_uids"]) == ("pigeond", ["0"])


def test_check_config_under_systemd_uses_its_state_directory(tmp_path: Path) -> None:
    """With $STATE_DIRECTORY set, as in the unit's ExecReload=, the db is in it and the
    second line says the defaults came from systemd."""
    cfg = write_config(tmp_path, "tick_ms = 250\n")
    state = tmp_path / "state"
    env = clean_env(tmp_path, PIGEOND_CONFIG=str(cfg), STATE_DIRECTORY=str(state))
    result = run_pigeond(["--check-config"], env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == f"# defaults from: systemd (STATE_DIRECTORY={state})"
    assert tomllib.loads(result.stdout)["db"] == str(state / "pigeond.db")


def test_check_config_says_the_defaults_are_the_callers_own(tmp_path: Path) -> None:
    """A user's --check-config says its defaults came from its own environment."""
    result = run_pigeond(["--check-config"], clean_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == (
        "# defaults from: this process's environment (no STATE_DIRECTORY: not pigeond.service)"
    )


def test_check_config_never_prints_the_password(tmp_path: Path) -> None:
    """With OPENCODE_SERVER_PASSWORD set, --check-config shows the user, never the password."""
    env = clean_env(tmp_path, OPENCODE_SERVER_PASSWORD=PASSWORD, OPENCODE_SERVER_USERNAME="bob")
    result = run_pigeond(["--check-config"], env)
    assert result.returncode == 0, result.stderr
    assert PASSWORD not in result.stdout + result.stderr
    assert "bob" in result.stdout


def test_check_config_accepts_unix_listen_with_mode(tmp_path: Path) -> None:
    """--listen unix:PATH:mode=600 is a valid endpoint for --check-config."""
    listen = f"unix:{tmp_path / 'p.sock'}:mode=600"
    result = run_pigeond(["--check-config", "--listen", listen], clean_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(result.stdout)["listen"] == listen


# --- start-up errors: exit 2, one line ---------------------------------------------


def test_check_config_unknown_key_is_one_line_exit_2(tmp_path: Path) -> None:
    """An unknown config key makes --check-config exit 2 with one stderr line naming it."""
    cfg = write_config(tmp_path, "tick_ms = 100\nbogus_key = 1\n")
    result = run_pigeond(["--check-config"], clean_env(tmp_path, PIGEOND_CONFIG=str(cfg)))
    assert result.returncode == 2
    assert "bogus_key" in assert_one_line_error(result)
    assert result.stdout == ""


def test_start_with_unknown_key_is_one_line_exit_2(tmp_path: Path) -> None:
    """An unknown config key stops the daemon at start with exit 2 and one line."""
    cfg = write_config(tmp_path, "bogus_key = 1\n")
    env = clean_env(tmp_path, PIGEOND_CONFIG=str(cfg))
    result = run_pigeond(["--listen", EPHEMERAL, "--db", str(tmp_path / "p.db")], env)
    assert result.returncode == 2
    assert "bogus_key" in assert_one_line_error(result)
    assert not (tmp_path / "p.db").exists()


def test_wrong_type_in_config_is_one_line_exit_2(tmp_path: Path) -> None:
    """tick_ms = "fast" in the file is a one-line error with exit 2."""
    cfg = write_config(tmp_path, 'tick_ms = "fast"\n')
    result = run_pigeond(["--check-config"], clean_env(tmp_path, PIGEOND_CONFIG=str(cfg)))
    assert result.returncode == 2
    assert "tick_ms" in assert_one_line_error(result)


def test_invalid_toml_is_one_line_exit_2(tmp_path: Path) -> None:
    """A config file that is not TOML is a one-line error with exit 2."""
    cfg = write_config(tmp_path, "tick_ms = = 1\n[[[\n")
    result = run_pigeond(["--check-config"], clean_env(tmp_path, PIGEOND_CONFIG=str(cfg)))
    assert result.returncode == 2
    assert "TOML" in assert_one_line_error(result)


def test_missing_config_file_is_one_line_exit_2(tmp_path: Path) -> None:
    """--config naming a missing file is a one-line error with exit 2."""
    missing = tmp_path / "nope.toml"
    result = run_pigeond(["--check-config", "--config", str(missing)], clean_env(tmp_path))
    assert result.returncode == 2
    assert str(missing) in assert_one_line_error(result)


def test_bad_env_value_is_one_line_exit_2(tmp_path: Path) -> None:
    """PIGEOND_TICK_MS=soon is a one-line error naming the variable, exit 2."""
    result = run_pigeond(["--check-config"], clean_env(tmp_path, PIGEOND_TICK_MS="soon"))
    assert result.returncode == 2
    assert "PIGEOND_TICK_MS" in assert_one_line_error(result)


def test_check_config_bad_listen_is_one_line_exit_2(tmp_path: Path) -> None:
    """--listen bogus:thing makes --check-config exit 2 with one line."""
    result = run_pigeond(["--check-config", "--listen", "bogus:thing"], clean_env(tmp_path))
    assert result.returncode == 2
    assert "listen" in assert_one_line_error(result)


def test_start_with_bad_listen_is_one_line_exit_2(tmp_path: Path) -> None:
    """--listen bogus:thing stops the daemon at start with exit 2 and one line."""
    db = tmp_path / "p.db"
    result = run_pigeond(["--listen", "bogus:thing", "--db", str(db)], clean_env(tmp_path))
    assert result.returncode == 2
    assert "bogus:thing" in assert_one_line_error(result)


def test_unknown_flag_is_usage_exit_2(tmp_path: Path) -> None:
    """An unknown command-line flag is a usage error with exit 2 and no traceback."""
    result = run_pigeond(["--no-such-flag"], clean_env(tmp_path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--no-such-flag" in result.stderr


# --- database errors ---------------------------------------------------------------


def test_db_that_is_a_directory_is_one_line_error(tmp_path: Path) -> None:
    """A --db naming a directory exits non-zero with one stderr line and no traceback."""
    db = tmp_path / "a-directory"
    db.mkdir()
    result = run_pigeond(
        ["--listen", EPHEMERAL, "--opencode-url", "", "--db", str(db)], clean_env(tmp_path)
    )
    assert result.returncode != 0
    assert str(db) in assert_one_line_error(result)


def test_db_that_is_not_sqlite_is_one_line_error(tmp_path: Path) -> None:
    """A --db file full of garbage exits non-zero with one stderr line and no traceback."""
    db = tmp_path / "garbage.db"
    db.write_bytes(bytes(range(256)) * 64)
    before = db.read_bytes()
    result = run_pigeond(
        ["--listen", EPHEMERAL, "--opencode-url", "", "--db", str(db)], clean_env(tmp_path)
    )
    assert result.returncode != 0
    assert str(db) in assert_one_line_error(result)
    assert db.read_bytes() == before


def test_db_whose_parent_is_a_file_is_one_line_error(tmp_path: Path) -> None:
    """A --db whose parent folder cannot be created exits non-zero with one line."""
    blocker = tmp_path / "plain-file"
    blocker.write_text("x", encoding="utf-8")
    db = blocker / "sub" / "p.db"
    result = run_pigeond(
        ["--listen", EPHEMERAL, "--opencode-url", "", "--db", str(db)], clean_env(tmp_path)
    )
    assert result.returncode != 0
    assert_one_line_error(result)


def test_port_in_use_is_one_line_error(tmp_path: Path) -> None:
    """Listening on a port that is taken exits non-zero with a 'cannot listen' line."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        args = ["--listen", f"tcp:{port}:interface=127.0.0.1", "--opencode-url", ""]
        result = run_pigeond([*args, "--db", str(tmp_path / "p.db")], clean_env(tmp_path))
    assert result.returncode != 0
    assert "cannot listen" in assert_one_line_error(result)


# --- a real start ------------------------------------------------------------------


def test_start_creates_db_parents_and_sigterm_exits_0(
    tmp_path: Path, start_daemon: list[RunningDaemon]
) -> None:
    """The daemon creates --db's missing parent folders, listens, and exits 0 on SIGTERM."""
    db = tmp_path / "not" / "yet" / "there" / "pigeond.db"
    args = ["--listen", EPHEMERAL, "--opencode-url", "", "--db", str(db)]
    daemon = spawn(start_daemon, args, clean_env(tmp_path))
    line = daemon.wait_for("listening on")
    assert "tcp:127.0.0.1:" in line
    assert db.parent.is_dir()
    assert db.is_file()
    assert daemon.terminate() == 0
    assert "Traceback" not in daemon.stderr_text()


def test_start_uses_default_db_under_xdg_state_home(
    tmp_path: Path, start_daemon: list[RunningDaemon]
) -> None:
    """Without --db the daemon creates $XDG_STATE_HOME/pigeond/pigeond.db."""
    daemon = spawn(start_daemon, ["--listen", EPHEMERAL, "--opencode-url", ""], clean_env(tmp_path))
    daemon.wait_for("listening on")
    assert (tmp_path / "xdg-state" / "pigeond" / "pigeond.db").is_file()
    assert daemon.terminate() == 0


def test_start_on_unix_socket_with_mode_600(
    tmp_path: Path, start_daemon: list[RunningDaemon]
) -> None:
    """--listen unix:PATH:mode=600 listens on a 0600 socket that accepts connections."""
    with tempfile.TemporaryDirectory(prefix="pgd") as short:
        sock_path = Path(short) / "p.sock"
        args = ["--listen", f"unix:{sock_path}:mode=600", "--opencode-url", ""]
        daemon = spawn(start_daemon, [*args, "--db", str(tmp_path / "p.db")], clean_env(tmp_path))
        line = daemon.wait_for("listening on")
        assert f"unix:{sock_path}" in line
        mode = sock_path.stat().st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o600
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(5)
            client.connect(str(sock_path))
        assert daemon.terminate() == 0
