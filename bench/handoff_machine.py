"""The machine side of the hand-off benches: where processes run, what they cost, and how
figures are summed up.  Not run by itself; bench/handoff_rig.py, handoff_table.py and
memory_table.py use it."""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import subprocess
from collections.abc import Sequence
from pathlib import Path

from machine import Cpus  # bench/

ROOT = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- machine and placement ------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of every thread of ``pid`` so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_kb(pid: int) -> dict[str, int]:
    """VmRSS and its parts (RssAnon, RssFile) from /proc/<pid>/status, in kB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def machine_line(cpus: Cpus) -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    placement = (
        f"pigeond pinned to CPU {sorted(cpus.daemon)}; stand-in, sender and bench on CPU"
        f" {sorted(cpus.others)}"
        if cpus.pinned
        else "one CPU: nothing pinned"
    )
    return (
        f"machine: {os.cpu_count()} cores, {model}, Python {platform.python_version()},"
        f" Linux {platform.release()}; {placement}"
    )


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: other work on the machine shows here."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def source_line() -> str:
    """Which pigeond ran: this checkout's commit, and how many files under pigeond/ differ."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "--no-optional-locks", "-C", str(ROOT), *args],
            capture_output=True, text=True, check=False,
        ).stdout.strip()  # fmt: skip

    changed = git("status", "--porcelain", "--", "pigeond").splitlines()
    state = f", {len(changed)} uncommitted change(s) under pigeond/" if changed else ", clean"
    return f"pigeond: this checkout at {git('log', '-1', '--format=%h %s')[:80]}{state}"


# -- figures -----------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else float("nan")


def median_range(values: Sequence[float], fmt: str = "{:,.1f}") -> str:
    """``median (min-max)`` of the runs."""
    return (
        f"{fmt.format(statistics.median(values))}"
        f" ({fmt.format(min(values))}-{fmt.format(max(values))})"
    )
