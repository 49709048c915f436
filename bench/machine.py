"""The machine under every benchmark: what it prints about it (the figures mean little
without it), and where the measured process and the load run (separate CPUs)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown CPU" where there is none)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: a busy machine shows in them."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


@dataclass(frozen=True)
class Cpus:
    """Where things run: the measured daemon on ``daemon``, the load and the bench on
    ``others`` (the same CPUs on a one-CPU machine: then nothing is pinned)."""

    daemon: set[int]
    others: set[int]

    @property
    def pinned(self) -> bool:
        return not self.daemon & self.others


def machine_cpus() -> Cpus:
    """The first CPU this process may use for the daemon, the rest for everything else."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return Cpus(set(cpus), set(cpus))
    return Cpus({cpus[0]}, set(cpus[1:]))


def pin_tasks(pid: int, cpus: set[int]) -> None:
    """Pin every thread of ``pid`` (threads it makes later inherit its main thread's CPUs)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.sched_setaffinity(int(tid), cpus)


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A temporary folder for one run's database and sockets, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=f"pigeond-bench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
