"""The open-files limit: every client connection costs pigeond one descriptor.

Linux starts processes with a soft limit of 1024 descriptors whatever the hard
limit allows, for the sake of old ``select()`` code; pigeond uses epoll, so at
start it raises its soft limit to the hard one.  Without that, a few hundred idle
connections exhaust the descriptors and the kernel's accept fails for every
client, /health included.  Under systemd, ``LimitNOFILE=`` in the unit sets both
(and the unit's system call filter refuses ``setrlimit``, so nothing is asked).
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from dataclasses import dataclass

from twisted.logger import Logger

log = Logger()

# descriptors besides the connections: the database and its WAL, the lock, the listeners,
# epoll, connections to opencode, and connections refused with 503 whose answer is being
# written (see pigeond.api.connection_slots)
HEADROOM = 128
# what "unlimited" becomes: the kernel refuses RLIM_INFINITY for RLIMIT_NOFILE
UNLIMITED_NOFILE = 1 << 20

GetLimit = Callable[[int], tuple[int, int]]
SetLimit = Callable[[int, tuple[int, int]], None]


@dataclass(frozen=True, slots=True)
class OpenFilesLimit:
    before: int  # the soft limit pigeond started with
    now: int  # the soft limit it runs with
    error: str | None = None  # why raising failed, when it did

    def describe(self) -> str:
        if self.error is not None:
            return f"open files limit stays {self.now}: raising it failed: {self.error}"
        if self.now > self.before:
            return f"open files limit {self.now} (raised from {self.before})"
        return f"open files limit {self.now}"


def raise_open_files_limit(
    get: GetLimit = resource.getrlimit, set_: SetLimit = resource.setrlimit
) -> OpenFilesLimit:
    """Raise RLIMIT_NOFILE's soft limit to its hard limit; never raises."""
    soft, hard = get(resource.RLIMIT_NOFILE)
    wanted = UNLIMITED_NOFILE if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return OpenFilesLimit(soft, soft)
    try:
        set_(resource.RLIMIT_NOFILE, (wanted, hard))
    except (OSError, ValueError) as e:
        return OpenFilesLimit(soft, soft, str(e))
    return OpenFilesLimit(soft, wanted)


def apply_open_files_limit(max_connections: int) -> OpenFilesLimit:
    """:func:`raise_open_files_limit`, logged; a warning when ``max_connections`` leaves too
    few descriptors (beyond it, the kernel's accept fails and clients see resets)."""
    limit = raise_open_files_limit()
    if limit.error is not None:
        log.warn("{line}", line=limit.describe())
    else:
        log.info("{line}", line=limit.describe())
    if limit.now != resource.RLIM_INFINITY and max_connections + HEADROOM > limit.now:
        log.warn(
            "max_connections {n} leaves fewer than {headroom} descriptors to spare under the"
            " open files limit {limit}: lower it, or raise LimitNOFILE=",
            n=max_connections, headroom=HEADROOM, limit=limit.now,
        )  # fmt: skip
    return limit
