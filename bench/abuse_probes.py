"""What every row of bench/abuse_table.py shares: its sizes, the row it returns, and the
/health probes each row takes from outside with how they are summed up into a figure and
a verdict.  The rows themselves are in bench/abuse_connections.py, abuse_storage.py and
abuse_delivery.py, grouped by what they attack.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from bench.harness import scratch_dir
from testkit.daemon_process import DaemonProcess
from testkit.raw_http import Response, health_probe

T = TypeVar("T")


@dataclass(frozen=True)
class Size:
    """How big each row is: the review's figures, or smaller for ``--quick``."""

    tricklers: int = 1100
    trickle_s: int = 30
    idle: int = 2000
    idle_probes: int = 150
    inbox_messages: int = 1000
    stalled: int = 16
    lock_s: float = 20.0
    batch: int = 10
    disk_messages: int = 10
    full_s: float = 5.0


FULL = Size()
QUICK = Size(
    tricklers=150, trickle_s=6, idle=300, idle_probes=20, inbox_messages=60, stalled=4,
    lock_s=8.0, batch=4, disk_messages=3, full_s=3.0,
)  # fmt: skip


@dataclass(frozen=True)
class Row:
    number: str
    measured: str
    figure: str
    target: str
    met: str  # "yes", "NO", "skipped", or "answered, but N/M not 200"


# -- shared helpers -------------------------------------------------------------------------


def workdir() -> contextlib.AbstractContextManager[Path]:
    return scratch_dir("abuse")


class Sampler(Generic[T]):
    """Calls ``sample`` every ``every_s`` seconds on a thread while in its ``with``."""

    def __init__(self, sample: Callable[[], T | None], every_s: float) -> None:
        self.sample = sample
        self.every_s = every_s
        self.values: list[T] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                value = self.sample()
                if value is not None:
                    self.values.append(value)
            self._stop.wait(self.every_s)

    def __enter__(self) -> Sampler[T]:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@dataclass(frozen=True)
class Probe:
    latency_s: float
    response: Response | None

    @property
    def status(self) -> int | None:
        return None if self.response is None else self.response.status


def probe(port: int, timeout_s: float = 1.0) -> Probe:
    response, latency = health_probe(port, timeout_s)
    return Probe(latency, response)


def tally(items: list[Any]) -> str:
    """``200x28, 503x2``: how often each value came, most common first."""
    return ", ".join(f"{value}x{n}" for value, n in Counter(items).most_common()) or "none"


def summary(probes: list[Probe], within_s: float) -> str:
    """Answered within the time / total, the statuses, and the worst latency."""
    in_time = sum(p.response is not None and p.latency_s < within_s for p in probes)
    worst = max((p.latency_s for p in probes), default=0.0)
    return (
        f"{in_time}/{len(probes)} answered within {within_s:g} s"
        f" (status {tally([p.status for p in probes])}), max {worst:.3f} s"
    )


def refusals(probes: list[Probe]) -> str:
    """The error texts of the answers that were not 200."""
    texts = []
    for p in probes:
        if p.response is not None and p.status != 200:
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                texts.append(str(p.response.json().get("error")))
    return tally(texts) if texts else "-"


def recovery(port: int, probes: list[Probe], since: float, limit_s: float = 45) -> str:
    """When the last probe was not a 200: probe every 0.25 s until one is, and say how long
    after ``since`` it came."""
    if probes and probes[-1].status == 200:
        return "/health 200 again by the last probe"
    while time.monotonic() - since < limit_s:
        if probe(port).status == 200:
            return f"/health 200 again {time.monotonic() - since:.1f} s after the attack began"
        time.sleep(0.25)
    return f"/health not 200 again within {limit_s:g} s"


def answered(probes: list[Probe], within_s: float) -> str:
    """Met: every probe answered in time; said apart: answered, but not all with 200."""
    if not all(p.response is not None and p.latency_s < within_s for p in probes):
        return "NO"
    busy = sum(p.status != 200 for p in probes)
    return "yes" if busy == 0 else f"answered, but {busy}/{len(probes)} not 200"


def limit_problems(daemon: DaemonProcess) -> str:
    out = daemon.output()
    found = [w for w in ("EMFILE", "Too many open files", "Could not accept") if w in out]
    return "log: " + (", ".join(found) if found else "no EMFILE / accept errors")


def yes(ok: bool) -> str:
    return "yes" if ok else "NO"
