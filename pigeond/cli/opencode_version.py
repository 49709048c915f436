"""Which major version of opencode a user runs, for ``pigeon install-plugin``.

opencode 1.x and 2.x load different plugins (:mod:`pigeond.plugin_bundles`), so the
install asks the ``opencode`` on the user's ``PATH`` (``opencode --version``: 1.x prints
its version alone, like ``1.18.33``; a version anywhere on the first line is taken, in
case 2.x names itself too), unless told with ``--opencode-version``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

MAJORS = (1, 2)
ASK_TIMEOUT_S = 10.0
_VERSION_RE = re.compile(r"(?<![\w.])v?(\d+)\.\d+\.\d+")


@dataclass(frozen=True, slots=True)
class Found:
    """The major version the plugin is for, and how it was decided (for the user)."""

    major: int
    why: str


def parse_major(text: str) -> int | None:
    """The major version ``opencode --version`` printed (the first version on its first
    line), if it is one pigeond has a plugin for."""
    lines = text.strip().splitlines()
    match = _VERSION_RE.search(lines[0]) if lines else None
    if match is None:
        return None
    major = int(match.group(1))
    return major if major in MAJORS else None


def ask_opencode(env: Mapping[str, str]) -> Found:
    """Ask the ``opencode`` on ``env``'s PATH; 1 (the plugin pigeond always installed) when
    there is none, or it does not answer with a version of 1.x or 2.x."""
    path = env.get("PATH", "")
    binary = shutil.which("opencode", path=path) if path else None
    if binary is None:
        return Found(1, "no opencode on PATH to ask; --opencode-version 2 installs the 2.x one")
    try:
        done = subprocess.run(
            [binary, "--version"],
            capture_output=True,
            timeout=ASK_TIMEOUT_S,
            env=dict(env),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return Found(1, f"{binary} --version failed ({e}); --opencode-version 2 for 2.x")
    answer = done.stdout.decode(errors="replace").strip()
    major = parse_major(answer) if done.returncode == 0 else None
    if major is None:
        shown = answer.splitlines()[0][:80] if answer else f"exit {done.returncode}"
        return Found(1, f"{binary} --version answered {shown!r}; --opencode-version 2 for 2.x")
    return Found(major, f"{binary} --version says {answer.splitlines()[0][:80]!r}")


def opencode_major(given: int | None, env: Mapping[str, str]) -> Found:
    """``given`` (``--opencode-version``) when set, else what the installed opencode says."""
    if given is not None:
        return Found(given, "as --opencode-version says")
    return ask_opencode(env)
