"""The real Codex CLI (npm ``@openai/codex``, pinned) for end-to-end tests, installed once
with npm into ``<cache>/codex/<version>/`` as opencode is (:mod:`testkit.npm_install`:
``$PIGEOND_TEST_CACHE``, else ``<repo>/.cache``; one install at a time, under a lock;
an interrupted install leaves nothing that looks installed), and run offline against
tests/fake_openai.py with a private ``CODEX_HOME``."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from testkit.npm_install import NpmInstallError, NpmTool, ensure_installed

CODEX_VERSION = "0.171.0"
ENTRY = Path("node_modules") / "@openai" / "codex" / "bin" / "codex.js"
MARKER = "pigeond-codex.json"
RUN_TIMEOUT_S = 120.0


class CodexInstallError(NpmInstallError):
    """npm is missing, or the install failed."""


CODEX = NpmTool(
    package="@openai/codex",
    folder="codex",
    marker=MARKER,
    project="pigeond-e2e-codex",
    error=CodexInstallError,
    program=ENTRY,
)


def ensure_codex() -> Path:
    """``@openai/codex@CODEX_VERSION`` installed (once); the path of its ``codex.js``."""
    return ensure_installed(CODEX, CODEX_VERSION)


def codex_home(folder: Path, model_url: str) -> Path:
    """A private ``CODEX_HOME`` whose model is the fake at ``model_url`` (``.../v1``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(
        f"""model = "fake-model"
model_provider = "fake"
approval_policy = "never"

[model_providers.fake]
name = "fake"
base_url = "{model_url}"
wire_api = "responses"
env_key = "FAKE_OPENAI_KEY"
""",
        encoding="utf-8",
    )
    return folder


def codex_exec(
    entry: Path, prompt: str, env: Mapping[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``codex exec`` of one prompt; its output (the last agent message on stdout)."""
    return subprocess.run(
        ["node", str(entry), "exec", "--skip-git-repo-check", prompt],
        env={**env, "FAKE_OPENAI_KEY": "sk-fake"}, cwd=cwd, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
