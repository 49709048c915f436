"""Installing a pinned release of an npm package once, into the test cache.

The real agents the tests run (opencode, Claude Code, Codex) are npm packages.  Each is
described once by an :class:`NpmTool`; :func:`ensure_installed` installs
``<package>@<version>`` into ``<cache>/<folder>/<version>/`` and returns the path of its
program.  ``<cache>`` is ``$PIGEOND_TEST_CACHE`` when set, else ``<repo root>/.cache``
(ignored by git).  npm keeps what it downloads in its own cache (``~/.npm``, as for any
npm project), so a fresh clone installs from there.

* Installs of one tool are serialised with an ``fcntl`` lock file
  (``<cache>/<folder>/.install.lock``), so parallel test runs (or pytest-xdist workers)
  never install into the same folder at once.
* npm installs (``--ignore-scripts``) into a staging folder, which gets a marker file
  and is renamed into place only when the program was found in it: an interrupted
  install leaves nothing that looks installed.  A failed install's npm log is kept as
  ``<cache>/<folder>/npm-install-<version>.log``.
* Without ``npm`` on PATH this raises the tool's error (a :class:`NpmInstallError`) with
  a clear message: the tests that need the tool fail, they never skip.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "PIGEOND_TEST_CACHE"
REPO_ROOT = Path(__file__).resolve().parents[1]
NPM_INSTALL_TIMEOUT_S = 600.0
LOCK_TIMEOUT_S = 900.0
VERSION_PROBE_TIMEOUT_S = 60.0
NPM_OPTIONS = (
    "--save-exact",
    "--no-audit",
    "--no-fund",
    "--no-update-notifier",
    "--include=optional",
    "--ignore-scripts",
)


class NpmInstallError(RuntimeError):
    """npm is missing, the install failed, or no working program was found."""


ProgramFinder = Callable[[Path, str], Path]
"""Finds the program in a fresh install folder of a version (raising if none works)."""


@dataclass(frozen=True, slots=True)
class NpmTool:
    """One npm package the tests install, and where its program is."""

    package: str
    """The npm package, e.g. ``opencode-ai``."""
    folder: str
    """Its folder in the cache: installs go to ``<cache>/<folder>/<version>``."""
    marker: str
    """The file whose presence (with the version in it) marks a finished install."""
    project: str
    """The ``name`` of the staging folder's package.json."""
    error: type[NpmInstallError]
    """What is raised when it cannot be installed."""
    program: Path | ProgramFinder
    """The program's path in the install folder when it is fixed (the marker then holds
    only the version), else what finds it in a fresh install (the marker records where,
    and it must be executable)."""

    def root(self) -> Path:
        """Where every installed version lives: ``<cache>/<folder>``."""
        return cache_root() / self.folder


def cache_root() -> Path:
    """``$PIGEOND_TEST_CACHE``, else ``<repo root>/.cache``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser().resolve() if configured else REPO_ROOT / ".cache"


def installed(tool: NpmTool, version: str) -> Path | None:
    """The program of an already finished install of ``version``, or None."""
    folder = tool.root() / version
    try:
        marker = json.loads((folder / tool.marker).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("version") != version:
        return None
    if isinstance(tool.program, Path):
        fixed = folder / tool.program
        return fixed if fixed.is_file() else None
    binary = folder / str(marker.get("binary"))
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def ensure_installed(tool: NpmTool, version: str) -> Path:
    """Install ``<package>@version`` if it is not in the cache yet; return its program."""
    found = installed(tool, version)
    if found is not None:
        return found
    root = tool.root()
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root / ".install.lock", LOCK_TIMEOUT_S, tool.error):
        found = installed(tool, version)  # another process may have finished meanwhile
        return found if found is not None else _install(tool, version, root)


@contextlib.contextmanager
def exclusive_lock(
    path: Path, timeout_s: float, error: type[NpmInstallError] = NpmInstallError
) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``, waited for at most ``timeout_s`` (then ``error``)."""
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
                    raise error(
                        f"another process has held {path} for over {timeout_s:g} s"
                    ) from exc
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _install(tool: NpmTool, version: str, root: Path) -> Path:
    spec = f"{tool.package}@{version}"
    npm = shutil.which("npm")
    if npm is None:
        raise tool.error(
            f"npm is not on PATH: the tests install {spec} from the npm registry (once, into"
            f" {root}). Install Node.js and npm (e.g. `apt-get install nodejs npm`)."
        )
    target = root / version
    staging = Path(tempfile.mkdtemp(prefix=f".{version}.staging-", dir=root))
    staging.chmod(0o755)
    log_path = staging / "npm-install.log"
    command = [npm, "install", *NPM_OPTIONS, spec]
    try:
        package = {"name": tool.project, "private": True}
        (staging / "package.json").write_text(json.dumps(package) + "\n", encoding="utf-8")
        _run_npm(tool, command, staging, log_path)
        marker: dict[str, str] = {"version": version}
        if isinstance(tool.program, Path):
            if not (staging / tool.program).is_file():
                raise tool.error(f"npm installed {spec} without {tool.program}")
        else:
            marker["binary"] = str(tool.program(staging, version).relative_to(staging))
        (staging / tool.marker).write_text(json.dumps(marker) + "\n", encoding="utf-8")
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
    found = installed(tool, version)
    if found is None:
        raise tool.error(f"{spec} was installed into {target} but not found")
    return found


def _run_npm(tool: NpmTool, command: list[str], cwd: Path, log_path: Path) -> None:
    """``npm install`` in ``cwd``, its output in ``log_path``; ``tool.error`` if it fails."""
    with open(log_path, "wb") as log:
        try:
            result = subprocess.run(
                command,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=NPM_INSTALL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise tool.error(
                f"{' '.join(command)} took over {NPM_INSTALL_TIMEOUT_S:g} s\n" + _tail(log_path)
            ) from exc
    if result.returncode != 0:
        raise tool.error(
            f"{' '.join(command)} failed (exit {result.returncode})\n" + _tail(log_path)
        )


def first_reporting(
    candidates: Iterable[Path],
    version: str,
    probe_home: Path,
    reported: Callable[[str], str],
    extra_env: Mapping[str, str] | None = None,
) -> tuple[Path | None, list[str]]:
    """The first of ``candidates`` whose ``--version`` output says ``version`` (as
    ``reported`` reads it), run with a private HOME (``probe_home``, deleted afterwards);
    and what each one tried before it said."""
    tried: list[str] = []
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(probe_home),
        "XDG_CONFIG_HOME": str(probe_home / "config"),
        "XDG_DATA_HOME": str(probe_home / "data"),
        "XDG_CACHE_HOME": str(probe_home / "cache"),
        "XDG_STATE_HOME": str(probe_home / "state"),
        **(extra_env or {}),
    }
    probe_home.mkdir(exist_ok=True)
    try:
        for candidate in candidates:
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
                tried.append(f"{candidate}: {exc}")
                continue
            if result.returncode == 0 and reported(result.stdout) == version:
                return candidate, tried
            tried.append(f"{candidate}: exit {result.returncode}, {result.stdout[:80]!r}")
    finally:
        shutil.rmtree(probe_home, ignore_errors=True)
    return None, tried


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    return f"--- {path.name} (tail) ---\n{text[-limit:]}"
