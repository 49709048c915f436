"""Files only their owner may read: every message is a prompt for an agent that runs commands.

The database, its WAL and shared-memory files, the instance lock and the bearer
token are created mode 0600, and the folders pigeond creates for them 0700.
A file that already exists with looser bits (an older pigeond, a copy made by
hand) is tightened, never loosened.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700
GROUP_OTHER_BITS = 0o077


def make_private_dirs(path: Path | str) -> None:
    """Create ``path`` and every missing parent mode 0700; existing folders are left alone
    (a user's home or ``/var/lib`` is not ours to change)."""
    missing: list[Path] = []
    current = Path(path)
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(folder, DIR_MODE)  # mkdir's mode is masked by the umask


def tighten(path: Path | str) -> bool:
    """Drop group and other permission bits from an existing file of ours; True if changed."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_mode & GROUP_OTHER_BITS == 0:
        return False
    os.chmod(path, stat.S_IMODE(st.st_mode) & ~GROUP_OTHER_BITS)
    return True


def create_private_file(path: Path | str) -> None:
    """Make sure ``path`` exists as a 0600 file (creating it empty), before a library
    such as SQLite opens it with its own default mode."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    os.close(fd)
    tighten(path)
