"""Is a session's directory really gone, or only out of pigeond's sight?

opencode answers 204 for a session whose directory was deleted, and no turn
runs: such a message is held (as an outage) until the directory is back.  A
directory pigeond cannot see is not missing: permission denied, or hidden by
the service's sandbox (``ProtectHome=`` mounts an empty or inaccessible
``/home``, ``/root`` and ``/run/user``).  Then pigeond delivers as usual and
lets opencode, which can see it, decide.
"""

from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath

SANDBOX_MASKED_ROOTS = ("/home", "/root", "/run/user")


def _hidden_by_sandbox(path: str) -> bool:
    """Whether the nearest existing ancestor is unreadable or a masked mount point."""
    for ancestor in PurePosixPath(path).parents:
        try:
            os.stat(ancestor)
        except PermissionError:
            return True
        except OSError:
            continue
        return str(ancestor) in SANDBOX_MASKED_ROOTS and os.path.ismount(ancestor)
    return False


def directory_problem(path: str) -> str | None:
    """Why a prompt for a session in ``path`` cannot run here, or None to deliver."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if _hidden_by_sandbox(path):
            return None
        return f"the session's directory {path} does not exist on this machine"
    except OSError:
        return None  # EACCES and the like: not ours to judge
    if not stat.S_ISDIR(st.st_mode):
        return f"the session's directory {path} is not a directory"
    return None
