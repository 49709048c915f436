"""Packaging: the systemd units, the default config file, the wheel and sdist, and the .deb.

The fast tests check the units with ``systemd-analyze verify`` (copies whose
``ExecStart`` runs this virtualenv's ``pigeond``) and against the manual. The
slow ones build the wheel and sdist, and build, install, run, upgrade, remove
and purge the .deb on this machine (root only; CI runs as root).
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import tomllib
import urllib.request
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from pigeond import __version__
from pigeond.config import (
    OPTIONS,
    SYSTEM_CONFIG_FILE,
    Config,
    default_runtime_socket,
    find_config_file,
    read_config_file,
)
from pigeond.delivery import preflight
from pigeond.service.main import build_parser as pigeond_parser
from testkit import daemon_process
from tests.docs_pages import page
from tests.docs_pages import section as docs_section

REPO = Path(__file__).resolve().parent.parent
SYSTEMD_DIR = REPO / "systemd"
SYSTEM_UNIT = SYSTEMD_DIR / "pigeond.service"
SOCKET_UNIT = SYSTEMD_DIR / "pigeond.socket"
USER_UNIT = SYSTEMD_DIR / "user" / "pigeond.service"
SOCKET_DROPIN = SYSTEMD_DIR / "socket-activation.conf"
UNIX_SOCKET_UNIT = SYSTEMD_DIR / "pigeond-unix.socket"
UNIX_SOCKET_DROPIN = SYSTEMD_DIR / "socket-activation-unix.conf"
SYSUSERS = SYSTEMD_DIR / "pigeond.sysusers"
DEFAULT_CONFIG = REPO / "packaging" / "pigeond.toml"
BUILD_DEB = REPO / "packaging" / "build_deb.py"
VENV_PIGEOND = Path(sys.executable).parent / "pigeond"

with (REPO / "pyproject.toml").open("rb") as _f:
    PROJECT: dict[str, Any] = tomllib.load(_f)["project"]
SCRIPTS: list[str] = sorted(PROJECT["scripts"])

LISTENING_RE = re.compile(r"listening on tcp:127\.0\.0\.1:(\d+)")
# What the installed package owns; cleaned up (or refused) around the .deb test.
INSTALLED_PATHS = (
    Path("/usr/lib/pigeond"),
    Path("/usr/bin/pigeond"),
    Path("/etc/pigeond"),
    Path("/var/lib/pigeond"),
    Path("/var/lib/private/pigeond"),
    Path("/lib/systemd/system/pigeond.service"),
    Path("/run/pigeond"),
)
# An admin's drop-in, which purge keeps (and names); the .deb test makes one and removes it.
ADMIN_DROPIN = Path("/etc/systemd/system/pigeond.service.d/override.conf")
# Where the maintainer scripts leave traces (enablement symlinks, masks, state).
SNAPSHOT_ROOTS = (
    Path("/etc/systemd"),
    Path("/var/lib/systemd/deb-systemd-helper-enabled"),
    Path("/var/lib/systemd/deb-systemd-helper-masked"),
    Path("/var/lib/systemd/deb-systemd-user-helper-enabled"),
)
RUN_TIMEOUT_S = 120.0
RELOAD_LOG_TIMEOUT_S = 10.0
BUILD_TIMEOUT_S = 600.0
START_TIMEOUT_S = 30.0


# -- helpers ---------------------------------------------------------------------------


def unit_settings(path: Path | str) -> dict[str, list[tuple[str, str]]]:
    """A unit file (a path, or its text) as {section: [(key, value), ...]}, in order,
    repeated keys kept."""
    text = path.read_text() if isinstance(path, Path) else path
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, f"{path}: setting outside a section: {line!r}"
        assert "=" in line, f"{path}: not a key=value line: {line!r}"
        key, _, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return sections


def values(path: Path, section: str, key: str) -> list[str]:
    """Every value of ``key`` in ``section`` (a repeated key accumulates)."""
    return [v for k, v in unit_settings(path).get(section, []) if k == key]


def systemd_analyze() -> str:
    """The systemd-analyze binary; a missing one fails the test (never a skip)."""
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.fail("systemd-analyze is missing: install Debian's systemd package")
    return path


def verify(units: Sequence[Path], runtime_dir: Path, *, user: bool = False) -> None:
    """``systemd-analyze verify`` must exit 0 and say nothing about any pigeond unit."""
    runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": "cat"}
    if user:
        # the user manager's lookup needs a runtime directory; none exists here
        env["XDG_RUNTIME_DIR"] = str(runtime_dir)
    cmd = [systemd_analyze(), *(["--user"] if user else []), "verify", "--man=no"]
    cmd += [str(u) for u in units]
    result = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S, check=False
    )
    output = result.stdout + result.stderr
    about_us = [ln for ln in output.splitlines() if "pigeond" in ln or "socket-activation" in ln]
    assert result.returncode == 0, f"{' '.join(cmd)} exited {result.returncode}:\n{output}"
    assert about_us == [], f"{' '.join(cmd)} warned:\n{output}"


def copy_for_verify(unit: Path, dest_dir: Path, exec_start: Path) -> Path:
    """A copy of ``unit`` whose ExecStart and ExecReload run ``exec_start`` instead of
    /usr/bin/pigeond (verify checks that every command it names exists)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    text = unit.read_text()
    # the program only: arguments after it (--config FILE, --check-config) stay
    runs_pigeond = re.compile(r"^(ExecStart|ExecReload)=/usr/bin/pigeond(?=\s|$)", re.M)
    assert re.search(r"^ExecStart=/usr/bin/pigeond(\s|$)", text, re.M), (
        f"{unit}: ExecStart does not run /usr/bin/pigeond"
    )
    dest = dest_dir / unit.name
    dest.write_text(runs_pigeond.sub(lambda m: f"{m.group(1)}={exec_start}", text))
    return dest


def commented_defaults(path: Path) -> dict[str, Any]:
    """The ``# key = value`` lines of the default config file, uncommented and parsed."""
    lines = [ln[2:] for ln in path.read_text().splitlines() if re.match(r"# [a-z_]+ = \S", ln)]
    parsed: dict[str, Any] = tomllib.loads("\n".join(lines))
    return parsed


def run(cmd: Sequence[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command, text output captured; the caller checks the result."""
    return subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        text=True,
        timeout=kwargs.pop("timeout", RUN_TIMEOUT_S),
        check=False,
        **kwargs,
    )


def ok(cmd: Sequence[str | Path], **kwargs: Any) -> str:
    """Run a command that must succeed; its stdout."""
    result = run(cmd, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(str(c) for c in cmd)} exited {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )
    return result.stdout


def isolated_env(home: Path) -> dict[str, str]:
    """No PIGEOND_*/XDG_*/OPENCODE_* settings and HOME in tmp; PIGEOND_CONFIG is not set,
    so the installed pigeond, started by hand, reads no config file (not the service's)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIGEOND_", "XDG_", "OPENCODE_", "PYTHON"))
        and k not in ("STATE_DIRECTORY", "VIRTUAL_ENV")
    }
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    return env


def dpkg_status(package: str) -> str:
    """dpkg's status of a package, e.g. 'install ok installed', or '' when unknown."""
    result = run(["dpkg-query", "-W", "-f=${Status}", package])
    return result.stdout.strip() if result.returncode == 0 else ""


def snapshot() -> set[str]:
    """Every path (with its symlink target) under the places maintainer scripts touch."""
    entries: set[str] = set()
    for root in SNAPSHOT_ROOTS:
        if not root.exists():
            continue
        for path in [root, *root.rglob("*")]:
            target = f" -> {os.readlink(path)}" if path.is_symlink() else ""
            entries.add(f"{path}{target}")
    return entries


def listing(deb: Path) -> dict[str, str]:
    """``dpkg-deb -c``: path (without the leading '.') -> 'mode owner/group'."""
    files: dict[str, str] = {}
    for line in ok(["dpkg-deb", "-c", deb]).splitlines():
        parts = line.split(maxsplit=5)
        path = parts[5].split(" -> ")[0].removeprefix(".")
        files[path.rstrip("/") or "/"] = f"{parts[0]} {parts[1]}"
    return files


class InstalledDaemon:
    """The installed /usr/bin/pigeond, run by hand on a free port with a temporary database."""

    def __init__(self, workdir: Path) -> None:
        self.args = [
            "/usr/bin/pigeond",
            "--listen",
            "tcp:0:interface=127.0.0.1",
            "--db",
            str(workdir / "state" / "pigeond.db"),
            "--opencode-url",
            "",
        ]
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=isolated_env(workdir / "home"),
            cwd=workdir,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)

    def port(self) -> int:
        """Wait for the 'listening on tcp:127.0.0.1:PORT' line."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            match = LISTENING_RE.search(line)
            if match:
                return int(match.group(1))
        pytest.fail(
            f"installed pigeond did not log 'listening on tcp:127.0.0.1:PORT' "
            f"(exit {self.proc.poll()}):\n{''.join(self.output)}"
        )

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=START_TIMEOUT_S)
        self._drainer.join(timeout=5)
        return self.proc.returncode


def get_json(url: str) -> tuple[int, dict[str, Any]]:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: dict[str, Any] = json.loads(response.read())
        return response.status, body


# -- the units -----------------------------------------------------------------------


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """The system, socket and user units, and the socket drop-in, verify cleanly."""
    assert VENV_PIGEOND.exists(), f"{VENV_PIGEOND} missing: install the package (make venv)"
    system = tmp_path / "system"
    service = copy_for_verify(SYSTEM_UNIT, system, VENV_PIGEOND)
    socket = system / SOCKET_UNIT.name
    shutil.copyfile(SOCKET_UNIT, socket)
    verify([service, socket], tmp_path / "runtime")
    # the drop-in is read from <unit>.service.d beside the verified unit
    dropin_dir = tmp_path / "activated"
    activated = copy_for_verify(SYSTEM_UNIT, dropin_dir, VENV_PIGEOND)
    shutil.copyfile(SOCKET_UNIT, dropin_dir / SOCKET_UNIT.name)
    (dropin_dir / "pigeond.service.d").mkdir()
    shutil.copyfile(SOCKET_DROPIN, dropin_dir / "pigeond.service.d" / SOCKET_DROPIN.name)
    verify([activated, dropin_dir / SOCKET_UNIT.name], tmp_path / "runtime")
    unix_dir = tmp_path / "unix"
    unix_service = copy_for_verify(SYSTEM_UNIT, unix_dir, VENV_PIGEOND)
    shutil.copyfile(UNIX_SOCKET_UNIT, unix_dir / UNIX_SOCKET_UNIT.name)
    (unix_dir / "pigeond.service.d").mkdir()
    shutil.copyfile(UNIX_SOCKET_DROPIN, unix_dir / "pigeond.service.d" / UNIX_SOCKET_DROPIN.name)
    verify([unix_service, unix_dir / UNIX_SOCKET_UNIT.name], tmp_path / "runtime")
    user = copy_for_verify(USER_UNIT, tmp_path / "user", VENV_PIGEOND)
    verify([user], tmp_path / "runtime-user", user=True)


def test_verify_reports_a_broken_unit(tmp_path: Path) -> None:
    """The verify check is not vacuous: a misspelt key and a missing ExecStart fail it."""
    misspelt = tmp_path / "misspelt" / "pigeond.service"
    misspelt.parent.mkdir()
    misspelt.write_text(
        SYSTEM_UNIT.read_text()
        .replace("WatchdogSec=", "WatchdogSecs=")
        .replace("ExecStart=/usr/bin/pigeond", f"ExecStart={VENV_PIGEOND}")
    )
    with pytest.raises(AssertionError, match="WatchdogSecs"):
        verify([misspelt], tmp_path / "runtime")
    missing = tmp_path / "missing" / "pigeond.service"
    missing.parent.mkdir()
    missing.write_text(
        SYSTEM_UNIT.read_text().replace("ExecStart=/usr/bin/pigeond", "ExecStart=/nonexistent/x")
    )
    with pytest.raises(AssertionError, match="/nonexistent/x"):
        verify([missing], tmp_path / "runtime")


def test_system_unit_has_the_required_settings() -> None:
    """Type=notify, watchdog, restart, reload, its user, directories and hardening."""
    service = dict(unit_settings(SYSTEM_UNIT)["Service"])
    expected = {
        "Type": "notify",
        "NotifyAccess": "main",
        "Restart": "on-failure",
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "User": "pigeond",
        "Group": "pigeond",
        "StateDirectory": "pigeond",
        "ConfigurationDirectory": "pigeond",
        "ProtectSystem": "strict",
        "ProtectHome": "read-only",
        "PrivateDevices": "yes",
        "NoNewPrivileges": "yes",
        "CapabilityBoundingSet": "",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    }
    assert {k: service.get(k) for k in expected} == expected
    assert service["ExecStart"].split()[0] == "/usr/bin/pigeond"
    assert re.fullmatch(r"\d+s", service["WatchdogSec"])
    assert values(SYSTEM_UNIT, "Service", "SystemCallFilter")[0] == "@system-service"
    # no network namespace: opencode and the clients are on the host's loopback
    assert "PrivateNetwork" not in service
    assert values(SYSTEM_UNIT, "Install", "WantedBy") == ["multi-user.target"]


def test_the_system_unit_names_its_config_file() -> None:
    """ExecStart= and ExecReload='s pigeond read /etc/pigeond/pigeond.toml because the unit
    names it (PIGEOND_CONFIG): a pigeond finds no system file by itself."""
    unit_env = dict(v.split("=", 1) for v in values(SYSTEM_UNIT, "Service", "Environment"))
    commands = values(SYSTEM_UNIT, "Service", "ExecStart") + values(
        SYSTEM_UNIT, "Service", "ExecReload"
    )
    pigeond_lines = [shlex.split(c) for c in commands if c.startswith("/usr/bin/pigeond")]
    assert len(pigeond_lines) == 2
    for argv in pigeond_lines:
        args = pigeond_parser().parse_args(argv[1:])
        assert find_config_file(args.config, unit_env) == Path(SYSTEM_CONFIG_FILE)
    assert find_config_file(None, {"HOME": "/nonexistent"}) is None


@pytest.mark.parametrize("unit", [SYSTEM_UNIT, USER_UNIT], ids=["system", "user"])
def test_reload_checks_the_configuration_before_the_signal(unit: Path) -> None:
    """ExecReload= first runs the service's own command line with ``--check-config`` (so
    it reads the file the service reads), and only then sends SIGHUP."""
    [exec_start] = values(unit, "Service", "ExecStart")
    assert exec_start.split()[0] == "/usr/bin/pigeond"
    reload = values(unit, "Service", "ExecReload")
    assert reload == [f"{exec_start} --check-config", "/bin/kill -HUP $MAINPID"]


def reload_as_systemd_does(pid: int, env: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:
    """The system unit's ExecReload= commands, run one after the other as systemd runs them
    ($MAINPID is ``pid``, /usr/bin/pigeond this virtualenv's, /etc/pigeond/pigeond.toml, if
    named, the file in ``env``'s PIGEOND_CONFIG); the first that fails ends the reload, and
    so does ``systemctl reload`` (exit 1)."""
    installed = {
        "/usr/bin/pigeond": str(VENV_PIGEOND),
        "/etc/pigeond/pigeond.toml": env["PIGEOND_CONFIG"],
    }
    results = []
    for line in values(SYSTEM_UNIT, "Service", "ExecReload"):
        argv = [installed.get(a, a).replace("$MAINPID", str(pid)) for a in shlex.split(line)]
        results.append(run(argv, env=env))
        if results[-1].returncode != 0:
            break
    return results


def wait_for_output(daemon: daemon_process.DaemonProcess, needle: str) -> str:
    """The daemon's output once it holds ``needle``; fails after RELOAD_LOG_TIMEOUT_S."""
    deadline = time.monotonic() + RELOAD_LOG_TIMEOUT_S
    while needle not in daemon.output():
        assert time.monotonic() < deadline, f"no {needle!r} in:\n{daemon.output()}"
        time.sleep(0.05)
    return daemon.output()


@pytest.mark.slow
def test_reload_with_a_broken_file_fails_and_never_signals_the_daemon(tmp_path: Path) -> None:
    """A broken config file stops the reload at the check (exit 2, one line naming the
    key): the daemon gets no SIGHUP, and the next good reload is the only one it sees."""
    cfg = tmp_path / "pigeond.toml"
    cfg.write_text('log_level = "info"\n')
    settings = {"PIGEOND_CONFIG": str(cfg)}
    env = daemon_process.isolated_env(tmp_path / "home", settings)
    db = tmp_path / "state" / "pigeond.db"
    with daemon_process.DaemonProcess(tmp_path, db, opencode_url="", env=settings) as daemon:
        cfg.write_text('tick_ms = "soon"\n')
        broken = reload_as_systemd_does(daemon.pid, env)
        assert [r.returncode for r in broken] == [2]
        [error] = broken[0].stderr.splitlines()
        assert error.startswith(f"pigeond: {cfg}: ") and "tick_ms" in error
        cfg.write_text('log_level = "debug"\n')
        good = reload_as_systemd_does(daemon.pid, env)
        assert [r.returncode for r in good] == [0, 0]
        output = wait_for_output(daemon, "reload: ")
        # signals arrive in order: had the broken reload signalled, its refusal came first
        assert "reload refused" not in output
        assert output.count("reload: ") == 1
        assert 'reload: applied log_level: "info" -> "debug"' in output
        assert daemon.running


def test_system_unit_sees_tmp_and_tells_users_apart() -> None:
    """No private /tmp (nor DynamicUser=, which implies it) and no user namespace: the static
    user pigeond sees session folders under /tmp and every peer's real uid."""
    service = dict(unit_settings(SYSTEM_UNIT)["Service"])
    hiding = {
        "PrivateTmp",
        "DynamicUser",
        "PrivateUsers",
        "JoinsNamespaceOf",
        "TemporaryFileSystem",
    }
    assert sorted(hiding & set(service)) == []
    assert (service["User"], service["Group"]) == ("pigeond", "pigeond")


# Run by the system's python with pigeond's own preflight code inlined: the checkout and
# its virtualenv may live under /tmp (CI clones anywhere), which a private /tmp hides.
SEES_FOLDERS = """
import json, os, sys
print(json.dumps({
    "problems": [directory_problem(p) for p in sys.argv[1:]],
    "tmp_writable": os.access("/tmp", os.W_OK),
}))
"""
SYSTEM_PYTHON = "/usr/bin/python3"


def under_unit_file_system(unit_text: str, *paths: str) -> dict[str, Any]:
    """``directory_problem`` for ``paths``, run in a mount namespace set up as the unit's
    file-system settings say: everything read-only for ProtectSystem=strict, and an
    empty /tmp and /var/tmp for PrivateTmp= (or DynamicUser=, which implies it)."""
    service = dict(unit_settings(unit_text).get("Service", []))
    script = ["set -e"]
    if service.get("ProtectSystem") == "strict":
        # read-only: / and whatever is mounted on its own at /tmp or /var/tmp
        script.append(
            "for m in / /tmp /var/tmp; do"
            ' if mountpoint -q "$m"; then mount -o remount,bind,ro "$m"; fi; done'
        )
    if "yes" in (service.get("PrivateTmp"), service.get("DynamicUser")):
        script += ["mount -t tmpfs tmpfs /tmp", "mount -t tmpfs tmpfs /var/tmp"]
    script.append('exec "$@"')
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare.append("--map-root-user")
    command = [*unshare, "sh", "-c", "\n".join(script), "sh"]
    code = Path(preflight.__file__).read_text(encoding="utf-8") + SEES_FOLDERS
    out = ok([*command, SYSTEM_PYTHON, "-c", code, *paths])
    result: dict[str, Any] = json.loads(out)
    return result


@pytest.fixture
def session_folders() -> Iterator[list[str]]:
    """A session folder under /tmp, one under /var/tmp, and a deleted one under /tmp."""
    kept = [tempfile.mkdtemp(prefix="pigeond-session-", dir=d) for d in ("/tmp", "/var/tmp")]
    deleted = tempfile.mkdtemp(prefix="pigeond-session-", dir="/tmp")
    os.rmdir(deleted)
    yield [*kept, deleted]
    for folder in kept:
        os.rmdir(folder)


def test_session_folders_under_tmp_are_seen_under_the_unit(session_folders: list[str]) -> None:
    """Under the system unit's own file-system settings a session folder under /tmp or
    /var/tmp is seen (delivered to), a deleted one is reported missing, and /tmp is
    read-only to pigeond."""
    seen = under_unit_file_system(SYSTEM_UNIT.read_text(), *session_folders)
    problems = seen["problems"]
    assert problems[:2] == [None, None]
    assert (
        problems[2]
        == f"the session's directory {session_folders[2]} does not exist on this machine"
    )
    assert seen["tmp_writable"] is False


def test_a_private_tmp_would_hide_session_folders(session_folders: list[str]) -> None:
    """The check above is not vacuous: with PrivateTmp=yes added to the unit, the existing
    session folders look missing (their messages were held until they expired)."""
    text = SYSTEM_UNIT.read_text().replace("[Service]\n", "[Service]\nPrivateTmp=yes\n", 1)
    problems = under_unit_file_system(text, *session_folders[:2])["problems"]
    assert all(p is not None and "does not exist" in p for p in problems), problems


@pytest.mark.parametrize("unit", [SYSTEM_UNIT, USER_UNIT], ids=["system", "user"])
def test_unit_gives_up_within_the_start_limit(unit: Path) -> None:
    """A service failing at once hits the start limit (no endless restarts); exit 2 (a
    configuration error) is never restarted."""
    settings = dict(unit_settings(unit)["Unit"])
    service = dict(unit_settings(unit)["Service"])
    interval_s = int(settings["StartLimitIntervalSec"].removesuffix("s"))
    burst = int(settings["StartLimitBurst"])
    restart_s = int(service["RestartSec"].removesuffix("s"))
    assert burst * restart_s < interval_s  # immediate failures reach the burst in the window
    assert burst >= 3  # a crash now and then is still restarted
    assert service["RestartPreventExitStatus"] == "2"
    assert "StartLimitIntervalSec" not in service  # [Service] would be the old, ignored place


def test_system_runtime_socket_is_for_the_group_pigeond() -> None:
    """/run/pigeond is 0750 and pigeond's runtime socket in it is for group pigeond and root."""
    service = dict(unit_settings(SYSTEM_UNIT)["Service"])
    env = dict(v.split("=", 1) for v in values(SYSTEM_UNIT, "Service", "Environment"))
    assert service["RuntimeDirectory"] == "pigeond"
    assert service["RuntimeDirectoryMode"] == "0750"
    assert env["PIGEOND_ALLOW_GROUP"] == service["Group"] == "pigeond"
    assert env["PIGEOND_ALLOW_UIDS"] == "0"
    # SQLite's temporary files need a writable folder: /tmp is read-only under strict
    assert env["TMPDIR"] == "/var/lib/" + service["StateDirectory"]


def test_unix_socket_unit_is_the_runtime_socket() -> None:
    """pigeond-unix.socket listens where the service's runtime socket would be (clients need
    no --url), group pigeond; its drop-in turns the service's own socket and folder off."""
    under_service = {"RUNTIME_DIRECTORY": "/run/pigeond", "STATE_DIRECTORY": "/var/lib/pigeond"}
    assert values(UNIX_SOCKET_UNIT, "Socket", "ListenStream") == [
        default_runtime_socket(under_service)
    ]
    socket_unit = dict(unit_settings(UNIX_SOCKET_UNIT)["Socket"])
    assert (socket_unit["SocketGroup"], socket_unit["SocketMode"]) == ("pigeond", "0660")
    assert socket_unit["Service"] == "pigeond.service"
    assert values(UNIX_SOCKET_DROPIN, "Service", "Environment") == [
        "PIGEOND_LISTEN=systemd:domain=UNIX:index=0",
        "PIGEOND_RUNTIME_SOCKET=",
    ]
    assert values(UNIX_SOCKET_DROPIN, "Service", "RuntimeDirectory") == [""]
    assert values(UNIX_SOCKET_DROPIN, "Unit", "Requires") == ["pigeond-unix.socket"]


def test_sysusers_file_makes_the_system_user_and_group(tmp_path: Path) -> None:
    """systemd-sysusers, run on an empty root, makes user and group pigeond: a system id, no
    login shell."""
    tool = shutil.which("systemd-sysusers")
    if tool is None:
        pytest.fail("systemd-sysusers is missing: install Debian's systemd package")
    (tmp_path / "etc").mkdir()
    ok([tool, f"--root={tmp_path}", SYSUSERS])
    passwd = (tmp_path / "etc/passwd").read_text().splitlines()
    group = (tmp_path / "etc/group").read_text().splitlines()
    [user] = [ln.split(":") for ln in passwd if ln.startswith("pigeond:")]
    [grp_] = [ln.split(":") for ln in group if ln.startswith("pigeond:")]
    assert 0 < int(user[2]) < 1000 and user[3] == grp_[2]
    assert user[6] == "/usr/sbin/nologin"


def test_every_system_unit_setting_is_justified_in_the_manual() -> None:
    """Each [Unit] and [Service] setting of the system unit has a row in the table of
    docs/install.md's "The system unit's settings"."""
    settings_section = docs_section(page("install.md"), "The system unit's settings")
    settings = unit_settings(SYSTEM_UNIT)
    keys = {k for k, _ in settings["Service"]}
    keys |= {k for k, _ in settings["Unit"] if k not in ("Description", "Documentation")}
    missing = sorted(k for k in keys if f"| `{k}=" not in settings_section)
    assert missing == []


def test_user_unit_runs_as_the_user_with_pigeond_default_database() -> None:
    """No DynamicUser and no StateDirectory (systemd 252 maps it to ~/.config) in the user unit."""
    service = dict(unit_settings(USER_UNIT)["Service"])
    assert service["Type"] == "notify"
    assert service["NotifyAccess"] == "main"
    assert service["ExecStart"] == "/usr/bin/pigeond"
    assert service["Restart"] == "on-failure"
    assert "DynamicUser" not in service
    assert "User" not in service
    assert "StateDirectory" not in service
    assert values(USER_UNIT, "Install", "WantedBy") == ["default.target"]


def test_socket_unit_listens_where_pigeond_does_by_default() -> None:
    """pigeond.socket holds pigeond's default address; the drop-in adopts fd 0."""
    default = Config().listen  # tcp:4097:interface=127.0.0.1
    match = re.fullmatch(r"tcp:(\d+):interface=([\d.]+)", default)
    assert match is not None
    port, interface = match.groups()
    assert values(SOCKET_UNIT, "Socket", "ListenStream") == [f"{interface}:{port}"]
    assert values(SOCKET_UNIT, "Install", "WantedBy") == ["sockets.target"]
    assert values(SOCKET_DROPIN, "Service", "Environment") == [
        "PIGEOND_LISTEN=systemd:domain=INET:index=0"
    ]
    assert values(SOCKET_DROPIN, "Unit", "Requires") == ["pigeond.socket"]


# -- the default config file ------------------------------------------------------------


def test_default_config_file_is_all_comments() -> None:
    """The packaged /etc/pigeond/pigeond.toml sets nothing: the built-in defaults rule."""
    assert read_config_file(DEFAULT_CONFIG) == {}


def test_default_config_file_shows_every_option_with_its_default(tmp_path: Path) -> None:
    """Uncommented, the file names every option once, with pigeond's own default."""
    shown = commented_defaults(DEFAULT_CONFIG)
    assert sorted(shown) == sorted(o.name for o in OPTIONS)
    uncommented = tmp_path / "pigeond.toml"
    uncommented.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in shown.items()))
    parsed = read_config_file(uncommented)  # every key known, every type right
    defaults = {f.name: f.default for f in fields(Config)}
    computed = ("db", "token_file", "runtime_socket")  # from the environment
    assert {k: v for k, v in parsed.items() if k not in computed} == {
        k: defaults[k] for k in parsed if k not in computed
    }
    # what they are under systemd: $STATE_DIRECTORY and $RUNTIME_DIRECTORY
    assert shown["db"] == "/var/lib/pigeond/pigeond.db"
    assert shown["token_file"] == "/var/lib/pigeond/token"
    assert shown["runtime_socket"] == "/run/pigeond/pigeond.sock"


# -- wheel and sdist --------------------------------------------------------------------


@pytest.mark.slow
def test_wheel_and_sdist_build(tmp_path: Path) -> None:
    """``python -m build`` makes an sdist and a wheel carrying every console script, the
    opencode plugin and the swarm-messaging skill."""
    ok([sys.executable, "-m", "build", "--outdir", tmp_path, REPO], timeout=BUILD_TIMEOUT_S)
    version = __version__
    wheel = tmp_path / f"pigeond-{version}-py3-none-any.whl"
    sdist = tmp_path / f"pigeond-{version}.tar.gz"
    assert wheel.is_file() and sdist.is_file(), sorted(p.name for p in tmp_path.iterdir())
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = zf.read(f"pigeond-{version}.dist-info/entry_points.txt").decode()
    assert "pigeond/service/main.py" in names
    plugin = "pigeond/opencode-plugin/pigeond-swarm.js"
    assert plugin in names
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read(plugin) == (REPO / "packaging/opencode-plugin/pigeond-swarm.js").read_bytes()
        v2 = zf.read("pigeond/opencode-plugin/pigeond-swarm-v2.js")
        assert v2 == (REPO / "packaging/opencode-plugin/pigeond-swarm-v2.js").read_bytes()
    assert not [n for n in names if "opencode-plugin/src/" in n]  # the sources are not shipped
    skill = "pigeond/agents/skill/swarm-messaging/SKILL.md"
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read(skill) == (REPO / skill).read_bytes()
    assert not [n for n in names if n.startswith(("tests/", "packaging/", "systemd/"))]
    scripts = re.findall(r"^(\S+) = ", entry_points.split("[console_scripts]")[1], re.M)
    assert sorted(scripts) == SCRIPTS
    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name}
    assert {
        "pyproject.toml",
        "README.md",
        "pigeond/__init__.py",
        "pigeond/service/main.py",
    } <= members


# -- the .deb ---------------------------------------------------------------------------


@pytest.fixture
def clean_machine() -> Iterator[None]:
    """Root, pigeond not installed; afterwards purged and every trace gone."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the .deb test must run as root in CI (it installs the package)")
        pytest.skip("installing a .deb needs root; CI runs this as root")
    status = dpkg_status("pigeond")
    present = [str(p) for p in (*INSTALLED_PATHS, ADMIN_DROPIN) if p.exists() or p.is_symlink()]
    if status not in ("", "unknown ok not-installed") or present:
        pytest.fail(
            "pigeond is already installed or has leftovers on this machine "
            f"(dpkg status {status!r}, paths {present}); this test installs and purges "
            "the package, so it refuses to touch them: `dpkg --purge pigeond` first"
        )
    private_existed = Path("/var/lib/private").exists()
    user_existed = run(["getent", "passwd", "pigeond"]).returncode == 0
    try:
        yield
    finally:
        if dpkg_status("pigeond") not in ("", "unknown ok not-installed"):
            run(["dpkg", "--purge", "pigeond"])
        ADMIN_DROPIN.unlink(missing_ok=True)
        if ADMIN_DROPIN.parent.is_dir() and not any(ADMIN_DROPIN.parent.iterdir()):
            ADMIN_DROPIN.parent.rmdir()
        shutil.rmtree("/run/pigeond", ignore_errors=True)
        shutil.rmtree("/var/lib/private/pigeond", ignore_errors=True)
        if Path("/var/lib/pigeond").is_symlink():
            Path("/var/lib/pigeond").unlink()
        shutil.rmtree("/var/lib/pigeond", ignore_errors=True)
        if not private_existed and Path("/var/lib/private").exists():
            Path("/var/lib/private").rmdir()
        if not user_existed:
            # the package keeps its system user (Debian's rule); this test machine does not
            run(["userdel", "pigeond"])
            run(["groupdel", "pigeond"])


@pytest.mark.slow
@pytest.mark.usefixtures("clean_machine")
def test_deb_builds_installs_runs_and_purges(tmp_path: Path) -> None:
    """``build_deb.py`` (``make deb``): file list, install, run, verify, upgrade, remove, purge."""
    before = snapshot()
    outdir = tmp_path / "out"
    arch = ok(["dpkg", "--print-architecture"]).strip()
    version = __version__
    started = time.monotonic()
    build: list[str | Path] = [sys.executable, BUILD_DEB, "--outdir", outdir]
    build += ["--workdir", tmp_path / "work"]
    ok([*build, "--compress-level", "1"], timeout=BUILD_TIMEOUT_S)
    build_s = time.monotonic() - started
    deb = outdir / f"pigeond_{version}_{arch}.deb"
    assert deb.is_file(), sorted(p.name for p in outdir.iterdir())

    # control data
    fields_ = {
        k: ok(["dpkg-deb", "-f", deb, k]).strip()
        for k in ("Package", "Version", "Architecture", "Depends")
    }
    assert fields_["Package"] == "pigeond"
    assert fields_["Version"] == version
    assert fields_["Architecture"] == arch  # zope.interface, cffi... are compiled
    assert "python3 (>= 3.11~)" in fields_["Depends"]
    assert "python3 (<< 3.12~)" in fields_["Depends"]
    assert ok(["dpkg-deb", "-I", deb, "conffiles"]).split() == ["/etc/pigeond/pigeond.toml"]

    # file list
    files = listing(deb)
    expected = {
        *(f"/usr/bin/{s}" for s in SCRIPTS),
        "/usr/lib/pigeond/pigeond/service/main.py",
        "/usr/lib/pigeond/twisted/__init__.py",
        "/usr/lib/pigeond/treq/__init__.py",
        "/usr/lib/pigeond/zope/interface/__init__.py",
        "/lib/systemd/system/pigeond.service",
        "/lib/systemd/system/pigeond.socket",
        "/lib/systemd/system/pigeond-unix.socket",
        "/usr/lib/systemd/user/pigeond.service",
        "/usr/lib/sysusers.d/pigeond.conf",
        "/usr/share/pigeond/socket-activation.conf",
        "/usr/share/pigeond/socket-activation-unix.conf",
        "/usr/share/pigeond/opencode-plugin/pigeond-swarm.js",
        "/usr/share/pigeond/opencode-plugin/pigeond-swarm-v2.js",
        "/usr/lib/pigeond/pigeond/opencode-plugin/pigeond-swarm.js",
        "/usr/lib/pigeond/pigeond/opencode-plugin/pigeond-swarm-v2.js",
        "/etc/pigeond/pigeond.toml",
        "/usr/share/doc/pigeond/copyright",
        "/usr/share/doc/pigeond/README.md",
    }
    assert expected <= set(files), sorted(expected - set(files))
    allowed = (
        "/etc/pigeond/",
        "/lib/systemd/system/",
        "/usr/bin/",
        "/usr/lib/pigeond/",
        "/usr/lib/systemd/user/",
        "/usr/lib/sysusers.d/pigeond.conf",
        "/usr/share/doc/pigeond/",
        "/usr/share/pigeond/",
    )
    dirs = {"/", "/etc", "/lib", "/lib/systemd", "/usr", "/usr/lib", "/usr/lib/systemd"}
    dirs.add("/usr/lib/sysusers.d")
    dirs |= {"/usr/share", "/usr/share/doc", *(a.rstrip("/") for a in allowed)}
    stray = sorted(p for p in files if p not in dirs and not p.startswith(allowed))
    assert stray == []
    assert sorted(p.removeprefix("/usr/bin/") for p in files if p.startswith("/usr/bin/")) == (
        SCRIPTS
    )
    assert not [p for p in files if p.endswith(".pyc") or "__pycache__" in p]
    assert not [p for p in files if p.startswith("/usr/lib/pigeond/bin")]
    assert {owner for _, owner in (v.split() for v in files.values())} == {"root/root"}
    assert files["/usr/bin/pigeond"].startswith("-rwxr-xr-x")
    assert files["/etc/pigeond/pigeond.toml"].startswith("-rw-r--r--")
    assert files["/usr/lib/sysusers.d/pigeond.conf"].startswith("-rw-r--r--")

    # install
    ok(["dpkg", "-i", deb])
    assert dpkg_status("pigeond") == "install ok installed"
    # the system user and group the service runs as (sysusers.d)
    user = ok(["getent", "passwd", "pigeond"]).strip().split(":")
    group = ok(["getent", "group", "pigeond"]).strip().split(":")
    assert user[3] == group[2] and 0 < int(user[2]) < 1000
    assert user[6] == "/usr/sbin/nologin"
    if shutil.which("deb-systemd-helper"):  # enabled, not started (nothing runs it here)
        wants = Path("/etc/systemd/system/multi-user.target.wants/pigeond.service")
        assert wants.is_symlink()
        assert os.readlink(wants) == "/lib/systemd/system/pigeond.service"
        assert not Path("/etc/systemd/system/sockets.target.wants/pigeond.socket").exists()
    for script in SCRIPTS:
        head = Path(f"/usr/bin/{script}").read_text().splitlines()[0]
        assert head == "#!/usr/bin/python3 -I"
    assert list(Path("/usr/lib/pigeond/pigeond").glob("__pycache__/*.cpython-311.pyc"))
    show_origins = (
        "import sys; sys.path.insert(0, '/usr/lib/pigeond')\n"
        "import pigeond, twisted, treq, zope.interface\n"
        "for m in (pigeond, twisted, treq, zope.interface): print(m.__file__)"
    )
    imported = ok(["/usr/bin/python3", "-I", "-c", show_origins], cwd="/")
    assert [ln for ln in imported.splitlines() if not ln.startswith("/usr/lib/pigeond/")] == []

    # run the installed files
    env = isolated_env(tmp_path / "home")
    assert ok(["/usr/bin/pigeond", "--version"], env=env, cwd="/").strip() == f"pigeond {version}"
    # started by hand, it is the user's pigeond: the service's file is not read
    effective = ok(["/usr/bin/pigeond", "--check-config"], env=env, cwd="/")
    assert effective.splitlines()[0] == "# config file: (none)"
    assert effective.splitlines()[2].startswith("# not read: /etc/pigeond/pigeond.toml,")
    assert 'listen = "tcp:4097:interface=127.0.0.1"' in effective
    # asked about the service's file by name, it shows the service's database, not HOME's
    system = ["/usr/bin/pigeond", "--config", "/etc/pigeond/pigeond.toml", "--check-config"]
    assert 'db = "/var/lib/pigeond/pigeond.db"' in ok(system, env=env, cwd="/").splitlines()
    daemon = InstalledDaemon(tmp_path)
    try:
        port = daemon.port()
        status, health = get_json(f"http://127.0.0.1:{port}/health")
        assert status == 200
        assert health["ok"] is True
        assert health["version"] == version
        assert health["arbiter"] is False
        send = ["/usr/bin/pigeon-send", "--url", f"http://127.0.0.1:{port}", "--from", "deb-test"]
        # over TCP with the bearer token pigeond made beside its database
        token_env = {**env, "PIGEOND_TOKEN_FILE": str(tmp_path / "state" / "token")}
        sent = ok([*send, "ses_packaging", "hello from the installed pigeon-send"], env=token_env)
        assert re.fullmatch(r"msg_[A-Za-z0-9_-]+", sent.strip())
        assert get_json(f"http://127.0.0.1:{port}/health")[1]["queued"] == 1
        project = tmp_path / "project"
        project.mkdir()
        ok(["/usr/bin/pigeon", "install-plugin", "--project", str(project)], env=env)
        installed = (project / ".opencode/plugin/pigeond-swarm.js").read_bytes()
        assert installed == Path("/usr/share/pigeond/opencode-plugin/pigeond-swarm.js").read_bytes()
    finally:
        code = daemon.stop()
    assert code == 0, "".join(daemon.output)

    # the installed units verify (their ExecStart exists now)
    verify(
        [
            Path("/lib/systemd/system/pigeond.service"),
            Path("/lib/systemd/system/pigeond.socket"),
            Path("/lib/systemd/system/pigeond-unix.socket"),
        ],
        tmp_path / "runtime",
    )
    verify(
        [Path("/usr/lib/systemd/user/pigeond.service")],
        tmp_path / "runtime-user",
        user=True,
    )

    # upgrade in place: maintainer scripts run their upgrade branches
    ok(["dpkg", "-i", deb])
    assert dpkg_status("pigeond") == "install ok installed"

    # what systemd's StateDirectory= with User=pigeond would have made
    Path("/var/lib/pigeond").mkdir(mode=0o700)
    Path("/var/lib/pigeond/pigeond.db").write_bytes(b"")
    Path("/var/lib/pigeond/token").write_bytes(b"")
    for made in ("", "pigeond.db", "token"):
        shutil.chown(Path("/var/lib/pigeond") / made, "pigeond", "pigeond")

    # remove keeps the config and the database
    ok(["dpkg", "-r", "pigeond"])
    assert dpkg_status("pigeond") == "deinstall ok config-files"
    assert not Path("/usr/bin/pigeond").exists()
    assert not Path("/usr/lib/pigeond").exists()  # prerm dropped the .pyc files too
    assert Path("/etc/pigeond/pigeond.toml").is_file()
    assert Path("/var/lib/pigeond/pigeond.db").is_file()

    # what pigeond-unix.socket (DirectoryMode=) leaves in /run, and an admin's drop-in
    Path("/run/pigeond").mkdir(mode=0o755)
    ADMIN_DROPIN.parent.mkdir(parents=True, exist_ok=True)
    ADMIN_DROPIN.write_text("[Service]\nEnvironment=PIGEOND_LOG_LEVEL=debug\n")

    # purge drops them and /run/pigeond, and the units' enablement state; it keeps the
    # admin's drop-in, and says so
    purged = run(["dpkg", "--purge", "pigeond"])
    assert purged.returncode == 0, purged.stdout + purged.stderr
    assert dpkg_status("pigeond") in ("", "unknown ok not-installed")
    leftovers = [str(p) for p in INSTALLED_PATHS if p.exists() or p.is_symlink()]
    assert leftovers == []
    assert ADMIN_DROPIN.is_file()
    assert (
        f"pigeond: purge leaves {ADMIN_DROPIN} (not the package's file):"
        " remove it if you no longer want it"
    ) in purged.stderr.splitlines()
    ADMIN_DROPIN.unlink()
    ADMIN_DROPIN.parent.rmdir()
    assert snapshot() == before
    # Debian keeps a package's system users after a purge (files they owned may remain)
    assert run(["getent", "passwd", "pigeond"]).returncode == 0
    print(f"deb: {deb.name}, {deb.stat().st_size / 1e6:.1f} MB, built in {build_s:.1f} s")
