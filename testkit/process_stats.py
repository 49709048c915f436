"""What the kernel says about a running process: its open-files limits and its memory."""

from __future__ import annotations

import resource
from pathlib import Path


def hard_nofile() -> int:
    """The hard RLIMIT_NOFILE of this process (what a child may raise its soft limit to)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def open_files_limit(pid: int) -> int:
    """The soft RLIMIT_NOFILE a running process has."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open files line")


def memory_mib(pid: int, field: str) -> float:
    """A ``/proc/<pid>/status`` memory field (``VmRSS``, ``VmHWM``) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0]) / 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")
