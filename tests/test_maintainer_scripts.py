"""The .deb's maintainer scripts (packaging/debian/prerm, postinst, postrm) as dpkg runs them.

Each scenario runs the real scripts, unchanged, in a throwaway copy of this machine: a
private mount namespace where ``/`` is an overlay whose writes land in a tmpfs (nothing
reaches the real disk), ``/run/systemd/system`` exists as on a machine booted with
systemd, and ``systemctl``, ``deb-systemd-invoke``, ``deb-systemd-helper`` and
``systemd-sysusers`` are stand-ins that record each call. dpkg's order of calls for an
upgrade, a remove and a purge is played step by step, as Debian policy (6.6) gives it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DEBIAN = REPO / "packaging" / "debian"
SERVICE = "pigeond.service"
SOCKETS = ("pigeond.socket", "pigeond-unix.socket")
UNITS = (SERVICE, *SOCKETS)
# What the stand-ins replace: every tool through which the scripts reach systemd.
STAND_INS = ("systemctl", "deb-systemd-invoke", "deb-systemd-helper", "systemd-sysusers")
PROGRAM_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
# Where the exchange folder appears inside the test root.
INSIDE = "/pigeond-test"
STAND_IN = f"""#!/bin/sh
# Stand-in for a systemd tool: records how it was called, one call a line, and succeeds.
echo "${{0##*/}} $*" >> {INSIDE}/calls
"""
# As root: the overlay, /dev for the scripts' >/dev/null, the exchange folder, then chroot.
ENTER = f"""set -eu
exchange=$1 scratch=$2
mount -t tmpfs tmpfs "$scratch"
mkdir "$scratch/upper" "$scratch/work" "$scratch/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$scratch/upper,workdir=$scratch/work" \\
    "$scratch/root"
mount --rbind /dev "$scratch/root/dev"
mkdir -p "$scratch/root{INSIDE}"
mount --bind "$exchange" "$scratch/root{INSIDE}"
exec chroot "$scratch/root" /bin/sh {INSIDE}/scenario.sh
"""
# Changes what systemd is running: a state change of a unit, not of its enablement.
RUNTIME_VERBS = frozenset(
    {"start", "stop", "restart", "try-restart", "reload-or-restart", "try-reload-or-restart"}
    | {"reload", "kill", "isolate"}
)
# dpkg's calls, in order, for each operation (Debian policy 6.6); the old and the new
# package's scripts are the same here.
UPGRADE = (
    ("prerm", "upgrade", "0.2.0"),
    ("postrm", "upgrade", "0.2.0"),
    ("postinst", "configure", "0.1.0"),
)
REMOVE = (("prerm", "remove"), ("postrm", "remove"))
PURGE = (*REMOVE, ("postrm", "purge"))
RUN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Step:
    """One maintainer script run: its arguments, exit status, stderr and stand-in calls."""

    argv: tuple[str, ...]
    status: int
    stderr: str
    calls: tuple[str, ...]


@dataclass(frozen=True)
class Scenario:
    """What a sequence of script runs did, and which of the watched paths remain."""

    steps: tuple[Step, ...]
    present: frozenset[str]

    def calls(self) -> list[str]:
        return [call for step in self.steps for call in step.calls]


def run_scripts(
    tmp_path: Path,
    steps: Sequence[Sequence[str]],
    *,
    files: Mapping[str, str] | None = None,
    folders: Sequence[str] = (),
    hidden: Sequence[str] = (),
    systemd_running: bool = True,
    watch: Sequence[str] = (),
    scripts: Path = DEBIAN,
) -> Scenario:
    """Run the maintainer scripts ``steps`` in a test root made from this machine: ``files``
    (path -> text) and ``folders`` made first, ``hidden`` programs deleted from it, and
    systemd's /run/systemd/system there when ``systemd_running``; which ``watch`` paths
    exist at the end is reported."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("unshare is missing: install Debian's util-linux package")
    exchange = tmp_path / "exchange"
    (exchange / "bin").mkdir(parents=True)
    shutil.copytree(scripts, exchange / "debian")
    for tool in set(STAND_INS) - set(hidden):
        (exchange / "bin" / tool).write_text(STAND_IN)
        (exchange / "bin" / tool).chmod(0o755)
    (exchange / "calls").write_text("")
    lines = [f"PATH={INSIDE}/bin:{':'.join(PROGRAM_DIRS)}", "export PATH"]
    lines.append("rm -rf /run/systemd/system")
    if systemd_running:
        lines.append("mkdir -p /run/systemd/system")
    # the overlay's copies only: a deleted file becomes a whiteout in the tmpfs
    lines += [f"rm -f {d}/{program}" for program in hidden for d in PROGRAM_DIRS]
    for folder in folders:
        lines.append(f"mkdir -p '{folder}'")
    for index, (path, text) in enumerate((files or {}).items()):
        (exchange / f"file.{index}").write_text(text)
        lines += [f"mkdir -p \"$(dirname '{path}')\"", f"cp {INSIDE}/file.{index} '{path}'"]
    for index, (script, *args) in enumerate(steps):
        argv = " ".join(f"'{a}'" for a in args)
        lines.append(f"echo '@@ {index}' >> {INSIDE}/calls")
        lines.append(f"sh {INSIDE}/debian/{script} {argv} 2> {INSIDE}/stderr.{index}")
        lines.append(f"echo $? > {INSIDE}/status.{index}")
    lines.append(f": > {INSIDE}/present")
    for path in watch:
        lines.append(
            f"if [ -e '{path}' ] || [ -L '{path}' ]; then echo '{path}' >> {INSIDE}/present; fi"
        )
    (exchange / "scenario.sh").write_text("\n".join(lines) + "\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    command = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        command.append("--map-root-user")
    command += ["sh", "-c", ENTER, "enter", str(exchange), str(scratch)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert result.returncode == 0, f"the test root failed:\n{result.stdout}{result.stderr}"
    recorded: dict[int, list[str]] = {}
    current: list[str] = []
    for line in (exchange / "calls").read_text().splitlines():
        if line.startswith("@@ "):
            current = recorded.setdefault(int(line[3:]), [])
        else:
            current.append(line)
    done = tuple(
        Step(
            tuple(step),
            int((exchange / f"status.{index}").read_text()),
            (exchange / f"stderr.{index}").read_text(),
            tuple(recorded.get(index, [])),
        )
        for index, step in enumerate(steps)
    )
    present = frozenset((exchange / "present").read_text().splitlines())
    return Scenario(done, present)


def runtime_changes(calls: Sequence[str], units: Sequence[str]) -> list[str]:
    """The calls (systemctl or deb-systemd-invoke) that start, stop or restart ``units``."""
    changes = []
    for call in calls:
        tool, *words = call.split()
        if tool not in ("systemctl", "deb-systemd-invoke"):
            continue
        verbs = [w for w in words if not w.startswith("-")]
        if verbs and verbs[0] in RUNTIME_VERBS and set(verbs[1:]) & set(units):
            changes.append(call)
    return changes


# -- upgrade --------------------------------------------------------------------------


def test_upgrade_restarts_only_the_service(tmp_path: Path) -> None:
    """An upgrade reloads systemd and try-restarts pigeond.service, nothing else: both
    listening sockets keep their descriptors, so no sender is refused or reset."""
    scenario = run_scripts(tmp_path, UPGRADE)
    assert [s.status for s in scenario.steps] == [0, 0, 0]
    calls = scenario.calls()
    assert runtime_changes(calls, SOCKETS) == []
    assert runtime_changes(calls, UNITS) == [f"deb-systemd-invoke try-restart {SERVICE}"]
    assert "systemctl --system daemon-reload" in calls
    # nothing that could stop a socket later either: no mask, disable or purge
    changed = [c for c in calls if c.startswith("deb-systemd-helper ") and c.split()[1] in
               ("mask", "disable", "purge")]  # fmt: skip
    assert changed == []


def test_upgrade_without_deb_systemd_invoke_restarts_only_the_service(tmp_path: Path) -> None:
    """Where deb-systemd-invoke is missing, systemctl try-restarts the service alone."""
    scenario = run_scripts(tmp_path, UPGRADE, hidden=["deb-systemd-invoke"])
    calls = scenario.calls()
    assert runtime_changes(calls, UNITS) == [f"systemctl try-restart {SERVICE}"]


def test_the_upgrade_check_sees_a_socket_restart(tmp_path: Path) -> None:
    """Not vacuous: a postinst that try-restarts the sockets with the service (as this
    package's once did) is caught."""
    scripts = tmp_path / "debian"
    shutil.copytree(DEBIAN, scripts)
    postinst = scripts / "postinst"
    text = postinst.read_text()
    assert text.count('deb-systemd-invoke try-restart "$UNIT"') == 1
    postinst.write_text(text.replace('try-restart "$UNIT"', 'try-restart $SOCKETS "$UNIT"'))
    scenario = run_scripts(tmp_path / "run", UPGRADE, scripts=scripts)
    assert runtime_changes(scenario.calls(), SOCKETS) == [
        f"deb-systemd-invoke try-restart {' '.join(SOCKETS)} {SERVICE}"
    ]


# -- remove and purge -------------------------------------------------------------------


def test_remove_stops_and_masks_the_service_and_both_sockets(tmp_path: Path) -> None:
    """dpkg -r: prerm stops both sockets and the service in one call; postrm masks all
    three so no leftover symlink starts them."""
    scenario = run_scripts(tmp_path, REMOVE)
    prerm, postrm = scenario.steps
    assert runtime_changes(prerm.calls, UNITS) == [
        f"deb-systemd-invoke stop {' '.join(SOCKETS)} {SERVICE}"
    ]
    masked = [c.split()[2] for c in postrm.calls if c.startswith("deb-systemd-helper mask ")]
    assert sorted(masked) == sorted(UNITS)
    assert runtime_changes(postrm.calls, UNITS) == []


def test_purge_deletes_state_configuration_and_run_folder(tmp_path: Path) -> None:
    """dpkg --purge: /var/lib/pigeond, /etc/pigeond and /run/pigeond (with a socket unit's
    leftover folder in it) are gone, and every unit's enablement state is forgotten."""
    watched = ["/var/lib/pigeond", "/etc/pigeond", "/run/pigeond", "/var/lib/private/pigeond"]
    scenario = run_scripts(
        tmp_path,
        PURGE,
        files={
            "/var/lib/pigeond/pigeond.db": "",
            "/etc/pigeond/pigeond.toml": "",
            "/etc/pigeond/secrets.env": "OPENCODE_SERVER_PASSWORD=x\n",
        },
        folders=["/run/pigeond"],
        watch=watched,
    )
    assert [s.status for s in scenario.steps] == [0, 0, 0]
    assert scenario.present == frozenset()
    purge = scenario.steps[2]
    for unit in UNITS:
        assert f"deb-systemd-helper purge {unit}" in purge.calls
        assert f"deb-systemd-helper unmask {unit}" in purge.calls
    assert purge.stderr == ""


def test_the_purge_check_sees_what_is_left(tmp_path: Path) -> None:
    """Not vacuous: the same paths, only removed (not purged), are all still there."""
    watched = ["/var/lib/pigeond", "/etc/pigeond", "/run/pigeond"]
    scenario = run_scripts(
        tmp_path,
        REMOVE,
        files={"/var/lib/pigeond/pigeond.db": "", "/etc/pigeond/pigeond.toml": ""},
        folders=["/run/pigeond"],
        watch=watched,
    )
    assert scenario.present == frozenset(watched)


def test_purge_keeps_the_admins_unit_files_and_names_each(tmp_path: Path) -> None:
    """Drop-ins and unit copies in /etc/systemd/system are the admin's: purge keeps them
    and says so, one stderr line for each."""
    admin = [
        "/etc/systemd/system/pigeond.service.d/override.conf",
        "/etc/systemd/system/pigeond.service.d/socket-activation.conf",
        "/etc/systemd/system/pigeond-unix.socket.d/backlog.conf",
        "/etc/systemd/system/pigeond.socket",
    ]
    scenario = run_scripts(tmp_path, PURGE, files=dict.fromkeys(admin, "[Unit]\n"), watch=admin)
    assert scenario.present == frozenset(admin)
    said = scenario.steps[2].stderr.splitlines()
    assert sorted(said) == sorted(
        f"pigeond: purge leaves {path} (not the package's file): remove it if you no longer want it"
        for path in admin
    )


# -- no systemd -----------------------------------------------------------------------


def test_without_systemd_no_unit_is_started_or_stopped(tmp_path: Path) -> None:
    """In a chroot or a container without systemd, upgrade, remove and purge never call
    systemctl or deb-systemd-invoke (enablement state is still kept by the helper)."""
    scenario = run_scripts(tmp_path, (*UPGRADE, *PURGE), systemd_running=False)
    assert [s.status for s in scenario.steps] == [0] * 6
    calls = scenario.calls()
    assert [c for c in calls if c.split()[0] in ("systemctl", "deb-systemd-invoke")] == []
    assert any(c.startswith("deb-systemd-helper purge ") for c in calls)
