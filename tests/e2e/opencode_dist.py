"""Installing pinned releases of the real opencode (npm package ``opencode-ai``).

:func:`ensure_opencode` installs ``opencode-ai@<version>`` from the npm
registry once, into ``<cache>/opencode/<version>/``, and returns the path of
the native ``opencode`` binary.  ``<cache>`` is ``$PIGEOND_TEST_CACHE`` when
set, else ``<repo root>/.cache`` (ignored by git).  npm keeps what it downloads in its
own cache (``~/.npm``, as for any npm project), so a fresh clone installs from there.

* Installs are serialised with an ``fcntl`` lock file, so parallel test runs
  (or pytest-xdist workers) never install into the same folder at once.
* npm installs into a staging folder that is renamed into place only when a
  working binary was found in it: an interrupted install leaves nothing that
  looks installed.
* The binary comes from the platform package opencode-ai depends on
  (``opencode-linux-x64``, ``opencode-linux-arm64``, their ``-baseline`` and
  ``-musl`` variants...).  npm may install several of them; the first one, in
  order of preference, whose ``--version`` prints the wanted version wins, and
  the others are deleted (about 140 MB each).
* Without ``npm`` on PATH this raises :class:`OpencodeInstallError` with a
  clear message: the e2e tests fail, they never skip.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

OPENCODE_1_18 = "1.18.33"
OPENCODE_1_15 = "1.15.4"
PINNED_VERSIONS = (OPENCODE_1_18, OPENCODE_1_15)

CACHE_ENV = "PIGEOND_TEST_CACHE"
REPO_ROOT = Path(__file__).resolve().parents[2]
NPM_INSTALL_TIMEOUT_S = 600.0
LOCK_TIMEOUT_S = 900.0
VERSION_PROBE_TIMEOUT_S = 60.0
_MARKER = "pigeond-opencode.json"


class OpencodeInstallError(RuntimeError):
    """npm is missing, the install failed, or no working binary was found."""


def cache_root() -> Path:
    """``$PIGEOND_TEST_CACHE``, else ``<repo root>/.cache``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser().resolve() if configured else REPO_ROOT / ".cache"


def opencode_cache() -> Path:
    """Where every installed version lives: ``<cache>/opencode``."""
    return cache_root() / "opencode"


def installed_binary(version: str) -> Path | None:
    """The binary of an already finished install of ``version``, or None."""
    folder = opencode_cache() / version
    try:
        marker = json.loads((folder / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("version") != version:
        return None
    binary = folder / str(marker.get("binary"))
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def ensure_opencode(version: str) -> Path:
    """Install ``opencode-ai@version`` if it is not in the cache yet; return its binary."""
    found = installed_binary(version)
    if found is not None:
        return found
    root = opencode_cache()
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root / ".install.lock", LOCK_TIMEOUT_S):
        found = installed_binary(version)  # another process may have finished meanwhile
        if found is not None:
            return found
        return _install(version, root)


@contextlib.contextmanager
def exclusive_lock(path: Path, timeout_s: float) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``, waited for at most ``timeout_s``."""
    with open(path, "a+b") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise OpencodeInstallError(
                        f"another process has held {path} for over {timeout_s:g} s"
                    ) from exc
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _install(version: str, root: Path) -> Path:
    npm = shutil.which("npm")
    if npm is None:
        raise OpencodeInstallError(
            f"npm is not on PATH: the e2e tests install opencode-ai@{version} from the npm "
            "registry (once, into "
            f"{root}). Install Node.js and npm (e.g. `apt-get install nodejs npm`)."
        )
    target = root / version
    staging = Path(tempfile.mkdtemp(prefix=f".{version}.staging-", dir=root))
    staging.chmod(0o755)
    log_path = staging / "npm-install.log"
    try:
        (staging / "package.json").write_text(
            json.dumps({"name": "pigeond-e2e-opencode", "private": True}) + "\n", encoding="utf-8"
        )
        command = [
            npm,
            "install",
            "--save-exact",
            "--no-audit",
            "--no-fund",
            "--no-update-notifier",
            "--include=optional",
            "--ignore-scripts",
            f"opencode-ai@{version}",
        ]
        with open(log_path, "wb") as log:
            try:
                result = subprocess.run(
                    command,
                    cwd=staging,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=NPM_INSTALL_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired as exc:
                raise OpencodeInstallError(
                    f"npm install opencode-ai@{version} took over {NPM_INSTALL_TIMEOUT_S:g} s\n"
                    + _tail(log_path)
                ) from exc
        if result.returncode != 0:
            raise OpencodeInstallError(
                f"npm install opencode-ai@{version} failed (exit {result.returncode}): "
                f"{' '.join(command)}\n" + _tail(log_path)
            )
        binary = _find_binary(staging, version)
        _prune_other_variants(staging, keep=binary.parent.parent.name)
        (staging / _MARKER).write_text(
            json.dumps({"version": version, "binary": str(binary.relative_to(staging))}) + "\n",
            encoding="utf-8",
        )
        if target.exists():  # a broken earlier install (no valid marker)
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        with contextlib.suppress(OSError):  # keep npm's log where the user can read it
            shutil.copyfile(log_path, root / f"npm-install-{version}.log")
        raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    found = installed_binary(version)
    if found is None:
        raise OpencodeInstallError(f"opencode {version} was installed into {target} but not found")
    return found


def _platform_package() -> str:
    """``opencode-<os>-<arch>``, the name of the platform package for this machine."""
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        machine, machine
    )
    system = {"win32": "windows"}.get(sys.platform, sys.platform)
    return f"opencode-{system}-{arch}"


def _candidates(folder: Path) -> list[Path]:
    """Every ``node_modules/opencode-*/bin/opencode``, this platform's plain package first."""
    preferred = _platform_package()
    found = [
        p
        for p in folder.glob("node_modules/opencode-*/bin/opencode")
        if p.parent.parent.name != "opencode-ai" and p.is_file()
    ]

    def rank(path: Path) -> tuple[int, str]:
        name = path.parent.parent.name
        if name == preferred:
            return (0, name)
        if name == preferred + "-baseline":
            return (1, name)
        if name.startswith(preferred):
            return (2, name)
        return (3, name)

    return sorted(found, key=rank)


def _find_binary(folder: Path, version: str) -> Path:
    """The first candidate binary that runs here and reports ``version``."""
    tried: list[str] = []
    probe_home = folder / ".probe-home"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(probe_home),
        "XDG_CONFIG_HOME": str(probe_home / "config"),
        "XDG_DATA_HOME": str(probe_home / "data"),
        "XDG_CACHE_HOME": str(probe_home / "cache"),
        "XDG_STATE_HOME": str(probe_home / "state"),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
    }
    try:
        for candidate in _candidates(folder):
            try:
                result = subprocess.run(
                    [str(candidate), "--version"],
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=VERSION_PROBE_TIMEOUT_S,
                    env=env,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                tried.append(f"{candidate.parent.parent.name}: {exc}")
                continue
            out = result.stdout.strip()
            if result.returncode == 0 and out.splitlines()[-1:] == [version]:
                return candidate
            tried.append(f"{candidate.parent.parent.name}: exit {result.returncode}, {out[:80]!r}")
    finally:
        shutil.rmtree(probe_home, ignore_errors=True)
    raise OpencodeInstallError(
        f"no working opencode {version} binary under {folder}/node_modules "
        f"(looked for {_platform_package()} and its variants); tried: {tried or 'none found'}"
    )


def _prune_other_variants(folder: Path, keep: str) -> None:
    """Delete the platform packages not used (each is ~140 MB; npm installs every variant)."""
    for package in folder.glob("node_modules/opencode-*"):
        if package.name not in (keep, "opencode-ai") and package.is_dir():
            shutil.rmtree(package)


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    return f"--- {path.name} (tail) ---\n{text[-limit:]}"
