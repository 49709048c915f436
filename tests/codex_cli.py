"""The real Codex CLI (npm ``@openai/codex``, pinned) for end-to-end tests, installed once
with npm into ``<cache>/codex/<version>/`` as tests/e2e/opencode_dist.py installs opencode
(``$PIGEOND_TEST_CACHE``, else ``<repo>/.cache``; one install at a time, under a lock;
an interrupted install leaves nothing that looks installed), and run offline against
tests/fake_openai.py with a private ``CODEX_HOME``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tests.e2e.opencode_dist import (
    LOCK_TIMEOUT_S,
    NPM_INSTALL_TIMEOUT_S,
    cache_root,
    exclusive_lock,
)

CODEX_VERSION = "0.171.0"
ENTRY = Path("node_modules") / "@openai" / "codex" / "bin" / "codex.js"
MARKER = "pigeond-codex.json"
RUN_TIMEOUT_S = 120.0


class CodexInstallError(RuntimeError):
    """npm is missing, or the install failed."""


def _installed(folder: Path) -> Path | None:
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    entry = folder / ENTRY
    ok = isinstance(marker, dict) and marker.get("version") == CODEX_VERSION and entry.is_file()
    return entry if ok else None


def ensure_codex() -> Path:
    """``@openai/codex@CODEX_VERSION`` installed (once); the path of its ``codex.js``."""
    root = cache_root() / "codex"
    found = _installed(root / CODEX_VERSION)
    if found is not None:
        return found
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root / ".install.lock", LOCK_TIMEOUT_S):
        found = _installed(root / CODEX_VERSION)
        if found is not None:
            return found
        npm = shutil.which("npm")
        if npm is None:
            raise CodexInstallError(
                f"npm is not on PATH: the Codex tests install @openai/codex@{CODEX_VERSION}"
                " from the npm registry (install Node.js and npm)"
            )
        staging = Path(tempfile.mkdtemp(prefix=f".{CODEX_VERSION}.staging-", dir=root))
        (staging / "package.json").write_text('{"name": "pigeond-e2e-codex", "private": true}\n')
        command = [
            npm, "install", "--save-exact", "--no-audit", "--no-fund", "--no-update-notifier",
            "--include=optional", "--ignore-scripts", f"@openai/codex@{CODEX_VERSION}",
        ]  # fmt: skip
        with open(staging / "npm-install.log", "wb") as log:
            result = subprocess.run(
                command, cwd=staging, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, timeout=NPM_INSTALL_TIMEOUT_S, check=False,
            )  # fmt: skip
        if result.returncode != 0 or not (staging / ENTRY).is_file():
            raise CodexInstallError(f"npm install failed: see {staging / 'npm-install.log'}")
        (staging / MARKER).write_text(json.dumps({"version": CODEX_VERSION}) + "\n")
        staging.chmod(0o755)
        os.replace(staging, root / CODEX_VERSION)
        return root / CODEX_VERSION / ENTRY


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
