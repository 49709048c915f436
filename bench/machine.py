"""What every benchmark prints about the machine it ran on: the figures mean little without it."""

from __future__ import annotations

import contextlib
import os
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
