"""Replacing a file atomically, for the ``pigeon install-*`` commands.

The content goes to a temporary file in the same folder, which is flushed to disk, given
its mode and renamed over the target: a reader (opencode, Claude Code, Codex) sees the
old file or the new one, never half of one, and a failed write leaves the old one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def replace_file(target: Path, content: bytes, mode: int) -> None:
    """Write ``content`` to ``target`` (its folder made if missing) atomically, ``mode``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
