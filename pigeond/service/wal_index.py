"""The wal-index header SQLite keeps at the start of a WAL database's ``-shm`` file: what
tells the quiet tick (pigeond/service/quiet.py), exactly, that a commit became visible.

A commit in WAL mode is three steps: its frames are appended to ``-wal``, they are synced,
and only then is the wal-index header rewritten, which is when a reader can see the
commit.  The ``-wal`` file's size and time change at the first step, so a look at the
database made between the first and the last (the sync takes milliseconds) does not see
the commit, although the file's stat says it happened; and on a file system whose
timestamps are coarse, a ``-wal`` rewritten in place after a checkpoint may not change
its stat at all.  The header (`its layout <https://www.sqlite.org/walformat.html>`_:
48 bytes, ``iChange`` counting commits, ``mxFrame``, the page count and the salts)
changes exactly when a commit becomes visible, so a look that starts after the header
was read sees every commit the header counts, and a commit it missed changes the header
again.
"""

from __future__ import annotations

import os
from typing import Final

# The first of the header's two copies (the one a writer updates last and readers trust).
HEADER_BYTES: Final = 48


def wal_index_header(path: str) -> bytes | None:
    """The wal-index header of the SQLite database at ``path``, None where it has none
    (not in WAL mode, no connection open, or unreadable).  One open, one ``pread``: no
    lock is taken and no SQLite call is made, so it may run in the event loop's thread."""
    try:
        fd = os.open(path + "-shm", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.pread(fd, HEADER_BYTES, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
