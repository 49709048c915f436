"""Running ``pigeon``, ``pigeon-send`` and ``pigeon-tui`` as a user whom file permissions
bind.  Root passes every permission check, and CI runs as root: so the client runs as
``nobody`` under ``setpriv`` (no supplementary groups), in a subprocess, from folders
that user may enter.  The system service's places (its socket, its database) are the
test's, passed to the CLI's ``main`` by a small driver.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

NOBODY = pwd.getpwnam("nobody")
# tests that need root's power to drop it (a non-root user cannot become another)
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: the client must run as another user (setpriv)"
)

# Runs one CLI's main with the paths given; its exit code is the process's.
_DRIVER = """
import json, sys
spec = json.loads(sys.argv[1])
if spec["cli"] == "pigeon-tui":
    from pigeond_tui.app import main
else:
    from pigeond.cli import pigeon, pigeon_send
    main = pigeon.main if spec["cli"] == "pigeon" else pigeon_send.main
    if "default_url" in spec:
        pigeon_send.DEFAULT_URL = spec["default_url"]
sys.exit(main(spec["argv"], env=spec["env"], **spec["paths"]))
"""


@contextmanager
def open_folder() -> Iterator[Path]:
    """A new folder with a short path (sockets need one) that anyone may enter."""
    top = Path(tempfile.mkdtemp(prefix="pgu-"))
    top.chmod(0o755)
    try:
        yield top
    finally:
        shutil.rmtree(top)


def run_as_nobody(
    cli: str,
    argv: list[str],
    home: Path,
    *,
    paths: Mapping[str, str] | None = None,
    default_url: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``cli``'s main (pigeon, pigeon-send or pigeon-tui) run as nobody with ``argv``, HOME
    ``home`` and nothing else in its environment; ``paths`` are main's keyword arguments
    (system_db, system_socket); ``default_url`` replaces pigeon-send's."""
    spec: dict[str, Any] = {
        "cli": cli, "argv": argv, "env": {"HOME": str(home)}, "paths": dict(paths or {}),
    }  # fmt: skip
    if default_url is not None:
        spec["default_url"] = default_url
    drop = ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups"]
    return subprocess.run(
        [*drop, sys.executable, "-c", _DRIVER, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=home,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)},
    )
