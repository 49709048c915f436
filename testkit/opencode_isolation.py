"""The offline, isolated world ``opencode serve`` runs in for the tests: its configuration
and its environment (testkit/opencode_server.py starts it in them).

Offline: the model is the fake LLM on 127.0.0.1; the ``OPENCODE_DISABLE_*``
switches turn off auto-update, model list fetching, sharing, LSP downloads
and default plugins; and opencode's embedded npm (it installs
``@opencode-ai/plugin`` into its config folder at start) is pointed at a
loopback port that refuses connections, so that install fails at once with a
logged warning.  The child gets a minimal environment: no inherited
``OPENCODE_*`` (a password, a session id), no API keys, no proxies.

opencode walks UP from a project directory looking for ``opencode.json``
(and ``.opencode/``): :func:`stray_configs` finds such files, which would silently
change the configuration under test.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from testkit.opencode_http import OpencodeError

_STRAY_CONFIG_NAMES = ("opencode.json", "opencode.jsonc", ".opencode")
_INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SHELL", "USER", "LOGNAME")
OFFLINE_ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


def opencode_config(llm_base_url: str) -> dict[str, Any]:
    """The global opencode.json: only the ``fake`` provider, pointing at the fake LLM.

    Its default model is ``fake/fake-model``; ``fake/fake-model-2`` (same fake LLM)
    is there for a prompt that names a model other than the default.
    """
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "enabled_providers": ["fake"],
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake LLM (loopback)",
                "options": {"baseURL": llm_base_url, "apiKey": "fake-key"},
                "models": {
                    "fake-model": {
                        "name": "Fake Model",
                        "limit": {"context": 128000, "output": 4096},
                    },
                    "fake-model-2": {
                        "name": "Fake Model 2",
                        "limit": {"context": 128000, "output": 4096},
                    },
                },
            }
        },
        "model": "fake/fake-model",
        "small_model": "fake/fake-model",
    }


def stray_configs(folder: Path) -> list[Path]:
    """opencode config files or folders in ``folder``'s ancestors (opencode would read them)."""
    return [
        parent / name
        for parent in folder.resolve().parents
        for name in _STRAY_CONFIG_NAMES
        if (parent / name).exists()
    ]


def isolated_folders(
    iso: Path, project_root: Path, projects: Sequence[str], llm_base_url: str
) -> dict[str, str]:
    """Lay the state folder out: a directory under ``project_root`` for each of ``projects``
    (their paths, by name, are returned), HOME and XDG_* under ``iso`` and the global
    opencode.json there.  OpencodeError where opencode would read a config above them."""
    stray = stray_configs(project_root)
    if stray:
        raise OpencodeError(
            f"opencode would read {[str(p) for p in stray]} above {project_root}: "
            "use a state folder with no opencode config in any parent folder"
        )
    dirs: dict[str, str] = {}
    for name in projects:
        folder = project_root / name
        folder.mkdir(parents=True, exist_ok=True)
        dirs[name] = str(folder)
    for sub in ("home", "config/opencode", "data", "cache", "state", "npm-cache"):
        (iso / sub).mkdir(parents=True, exist_ok=True)
    (iso / "config" / "opencode" / "opencode.json").write_text(
        json.dumps(opencode_config(llm_base_url), indent=2) + "\n", encoding="utf-8"
    )
    return dirs


def opencode_env(iso: Path, refused_port: int, extra_env: Mapping[str, str]) -> dict[str, str]:
    """opencode's whole environment: HOME and XDG_* under ``iso``, offline, its npm pointed
    at ``refused_port``, then ``extra_env``."""
    env = {k: os.environ[k] for k in _INHERITED_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(OFFLINE_ENV)
    env.update(
        {
            "HOME": str(iso / "home"),
            "XDG_CONFIG_HOME": str(iso / "config"),
            "XDG_DATA_HOME": str(iso / "data"),
            "XDG_CACHE_HOME": str(iso / "cache"),
            "XDG_STATE_HOME": str(iso / "state"),
            # opencode's embedded npm: a loopback port that refuses connections.
            "npm_config_registry": f"http://127.0.0.1:{refused_port}/",
            "npm_config_fetch_retries": "0",
            "npm_config_fetch_timeout": "2000",
            "npm_config_cache": str(iso / "npm-cache"),
            "npm_config_update_notifier": "false",
        }
    )
    env.update(extra_env)
    return env
