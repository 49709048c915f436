"""The real Claude Code (npm ``@anthropic-ai/claude-code``), installed once and run offline.

:func:`ensure_claude_code` installs the pinned :data:`CLAUDE_CODE_VERSION` from the npm
registry once, into ``<cache>/claude-code/<version>/`` (``<cache>`` as for opencode:
``$PIGEOND_TEST_CACHE``, else ``<repo root>/.cache``; see :mod:`tests.e2e.opencode_dist`,
whose lock it shares), and returns the path of the native ``claude`` binary.  The npm
package is a wrapper whose postinstall copies the binary of its platform package
(``@anthropic-ai/claude-code-linux-x64`` ...) over a stub; the tests install with
``--ignore-scripts`` and run that platform package's ``claude`` directly.  Without npm
this raises :class:`ClaudeInstallError`: the tests that need it fail, they never skip.

:class:`ClaudeCode` runs ``claude -p PROMPT --output-format json`` in a private HOME
against :class:`tests.fake_anthropic.FakeAnthropic`, with the environment under which it
talks to nothing but that fake on 127.0.0.1 (no login, no onboarding, no telemetry, no
update check): see :func:`claude_env`.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.opencode_dist import cache_root, exclusive_lock

# The one place the tested Claude Code version is named.
CLAUDE_CODE_VERSION = "2.1.332"
NPM_PACKAGE = "@anthropic-ai/claude-code"
NPM_INSTALL_TIMEOUT_S = 600.0
LOCK_TIMEOUT_S = 900.0
VERSION_PROBE_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 120.0
_MARKER = "pigeond-claude-code.json"
API_KEY = "sk-fake-key-for-tests-only"
# Variables that keep Claude Code off the network in ``claude -p``; in the interactive
# session they also switch the channels feature off (see tests/claude_tui.py).
PRIVACY_VARIABLES = (
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_TELEMETRY",
    "DISABLE_AUTOUPDATER",
)


class ClaudeInstallError(RuntimeError):
    """npm is missing, the install failed, or no working binary was found."""


def claude_code_cache() -> Path:
    return cache_root() / "claude-code"


def installed_binary(version: str = CLAUDE_CODE_VERSION) -> Path | None:
    """The binary of an already finished install of ``version``, or None."""
    folder = claude_code_cache() / version
    try:
        marker = json.loads((folder / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("version") != version:
        return None
    binary = folder / str(marker.get("binary"))
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def ensure_claude_code(version: str = CLAUDE_CODE_VERSION) -> Path:
    """Install ``@anthropic-ai/claude-code@version`` unless cached; return its binary."""
    found = installed_binary(version)
    if found is not None:
        return found
    root = claude_code_cache()
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root / ".install.lock", LOCK_TIMEOUT_S):
        found = installed_binary(version)  # another process may have finished meanwhile
        return found if found is not None else _install(version, root)


def _install(version: str, root: Path) -> Path:
    npm = shutil.which("npm")
    if npm is None:
        raise ClaudeInstallError(
            f"npm is not on PATH: these tests install {NPM_PACKAGE}@{version} from the npm"
            f" registry (once, into {root}). Install Node.js and npm."
        )
    staging = Path(tempfile.mkdtemp(prefix=f".{version}.staging-", dir=root))
    staging.chmod(0o755)
    log_path = staging / "npm-install.log"
    command = [npm, "install", "--save-exact", "--no-audit", "--no-fund"]
    command += ["--no-update-notifier", "--include=optional", "--ignore-scripts"]
    command.append(f"{NPM_PACKAGE}@{version}")
    try:
        package = {"name": "pigeond-tests-claude-code", "private": True}
        (staging / "package.json").write_text(json.dumps(package) + "\n", encoding="utf-8")
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
                raise ClaudeInstallError(
                    f"{' '.join(command)} took over {NPM_INSTALL_TIMEOUT_S:g} s\n" + _tail(log_path)
                ) from exc
        if result.returncode != 0:
            raise ClaudeInstallError(
                f"{' '.join(command)} failed (exit {result.returncode})\n" + _tail(log_path)
            )
        binary = _find_binary(staging, version)
        marker = {"version": version, "binary": str(binary.relative_to(staging))}
        (staging / _MARKER).write_text(json.dumps(marker) + "\n", encoding="utf-8")
        target = root / version
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
        raise ClaudeInstallError(f"Claude Code {version} was installed into {root} but not found")
    return found


def _platform_package() -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64"}.get(machine, machine)
    return f"claude-code-{sys.platform}-{arch}"


def _find_binary(folder: Path, version: str) -> Path:
    """The first platform package's ``claude`` that runs here and reports ``version``."""
    preferred = _platform_package()
    candidates = sorted(
        (p for p in folder.glob("node_modules/@anthropic-ai/claude-code-*/claude") if p.is_file()),
        key=lambda p: (p.parent.name != preferred, p.parent.name),
    )
    tried = []
    probe_home = folder / ".probe-home"
    probe_home.mkdir()
    try:
        for candidate in candidates:
            try:
                result = subprocess.run(
                    [str(candidate), "--version"],
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=VERSION_PROBE_TIMEOUT_S,
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(probe_home)},
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                tried.append(f"{candidate.parent.name}: {exc}")
                continue
            if result.returncode == 0 and result.stdout.split()[:1] == [version]:
                return candidate
            said = result.stdout[:80]
            tried.append(f"{candidate.parent.name}: exit {result.returncode} {said!r}")
    finally:
        shutil.rmtree(probe_home, ignore_errors=True)
    raise ClaudeInstallError(
        f"no working Claude Code {version} binary under {folder}/node_modules/@anthropic-ai"
        f" (looked for {preferred} and its variants); tried: {tried or 'none found'}"
    )


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    return f"--- {path.name} (tail) ---\n{text[-limit:]}"


# -- running it ---------------------------------------------------------------------------


def claude_env(home: Path, base_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment of its own for Claude Code: private HOME, the fake model, nothing
    else reached (measured with strace: with these it connects only to ``base_url``).
    PATH keeps this Python's folder first, so ``pigeon-hook`` and ``pigeon-mcp`` resolve
    to this checkout's."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin")])
    env = {
        "PATH": path,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": API_KEY,
        **dict.fromkeys(PRIVACY_VARIABLES, "1"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_STATE_HOME": str(home / ".local/state"),
    }
    return env | dict(extra or {})


@dataclass(frozen=True, slots=True)
class ClaudeRun:
    """One finished ``claude -p`` run."""

    returncode: int
    stdout: str
    stderr: str
    home: Path

    @property
    def result(self) -> dict[str, Any]:
        """The ``--output-format json`` result object (AssertionError if there is none)."""
        try:
            parsed = json.loads(self.stdout)
        except ValueError as exc:
            raise AssertionError(f"no JSON result: {self.stdout!r} {self.stderr!r}") from exc
        assert isinstance(parsed, dict), parsed
        return parsed

    @property
    def session_id(self) -> str:
        return str(self.result["session_id"])

    def transcript(self) -> Path:
        """The session's transcript: ``~/.claude/projects/<folder>/<session>.jsonl``."""
        found = list((self.home / ".claude" / "projects").glob(f"*/{self.session_id}.jsonl"))
        assert len(found) == 1, found
        return found[0]

    def entries(self) -> list[dict[str, Any]]:
        """The transcript's lines, parsed."""
        lines = self.transcript().read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]


class ClaudeCode:
    """Runs the pinned Claude Code in ``home`` against the fake model at ``base_url``."""

    def __init__(self, binary: Path, home: Path, base_url: str) -> None:
        self.binary = binary
        self.home = home
        self.base_url = base_url
        home.mkdir(parents=True, exist_ok=True)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return claude_env(self.home, self.base_url, extra)

    def run(
        self,
        prompt: str,
        cwd: Path,
        *args: str,
        env: Mapping[str, str] | None = None,
        timeout_s: float = RUN_TIMEOUT_S,
    ) -> ClaudeRun:
        """``claude -p PROMPT --output-format json ARGS...`` in ``cwd``, to its end."""
        command: Sequence[str] = [str(self.binary), "-p", prompt, "--output-format", "json", *args]
        done = subprocess.run(
            command,
            cwd=cwd,
            env=self.env(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        return ClaudeRun(done.returncode, done.stdout, done.stderr, self.home)
