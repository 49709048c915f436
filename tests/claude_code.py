"""The real Claude Code (npm ``@anthropic-ai/claude-code``), installed once and run offline.

:func:`ensure_claude_code` installs the pinned :data:`CLAUDE_CODE_VERSION` once, into
``<cache>/claude-code/<version>/`` (with :mod:`testkit.npm_install`, as opencode is), and
returns the path of the native ``claude`` binary.  The npm package is a wrapper whose
postinstall copies the binary of its platform package (``@anthropic-ai/claude-code-linux-x64``
...) over a stub; the tests install with ``--ignore-scripts`` and run that platform
package's ``claude`` directly.  Without npm this raises :class:`ClaudeInstallError`: the
tests that need it fail, they never skip.

:class:`ClaudeCode` runs ``claude -p PROMPT --output-format json`` in a private HOME
against :class:`tests.fake_anthropic.FakeAnthropic`, with the environment under which it
talks to nothing but that fake on 127.0.0.1 (no login, no onboarding, no telemetry, no
update check): see :func:`claude_env`.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.npm_install import (
    NpmInstallError,
    NpmTool,
    ensure_installed,
    first_reporting,
    installed,
)

# The one place the tested Claude Code version is named.
CLAUDE_CODE_VERSION = "2.1.332"
NPM_PACKAGE = "@anthropic-ai/claude-code"
RUN_TIMEOUT_S = 120.0
API_KEY = "sk-fake-key-for-tests-only"
# Variables that keep Claude Code off the network in ``claude -p``; in the interactive
# session they also switch the channels feature off (see tests/claude_tui.py).
PRIVACY_VARIABLES = (
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_TELEMETRY",
    "DISABLE_AUTOUPDATER",
)


class ClaudeInstallError(NpmInstallError):
    """npm is missing, the install failed, or no working binary was found."""


def claude_code_cache() -> Path:
    return CLAUDE_CODE.root()


def installed_binary(version: str = CLAUDE_CODE_VERSION) -> Path | None:
    """The binary of an already finished install of ``version``, or None."""
    return installed(CLAUDE_CODE, version)


def ensure_claude_code(version: str = CLAUDE_CODE_VERSION) -> Path:
    """Install ``@anthropic-ai/claude-code@version`` unless cached; return its binary."""
    return ensure_installed(CLAUDE_CODE, version)


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
    binary, tried = first_reporting(
        candidates, version, folder / ".probe-home", lambda out: (out.split() or [""])[0]
    )
    if binary is None:
        raise ClaudeInstallError(
            f"no working Claude Code {version} binary under {folder}/node_modules/@anthropic-ai"
            f" (looked for {preferred} and its variants); tried: {tried or 'none found'}"
        )
    return binary


CLAUDE_CODE = NpmTool(
    package=NPM_PACKAGE,
    folder="claude-code",
    marker="pigeond-claude-code.json",
    project="pigeond-tests-claude-code",
    error=ClaudeInstallError,
    program=_find_binary,
)


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
