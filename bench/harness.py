"""The harness every benchmark runs on: the machine it prints (the figures mean little
without it), where the measured process and the load run (separate CPUs), the options and
the start every table shares, its child processes, and how figures are summed up.

A bench runs from the checkout as a module (``.venv/bin/python -m bench.accept_table``), so
that ``bench`` and ``testkit`` (the daemon process, the stand-ins and the PostgreSQL cluster
the tests use too) import as packages."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from testkit.daemon_process import DaemonProcess

ROOT = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
DAEMON_START_TIMEOUT_S = 30.0
DAEMON_STOP_TIMEOUT_S = 10.0
# A bench measures delivery or accepts, not the flood guard: 1,000 msg/s from 10 senders
# would be refused at the defaults (10 msg/s per sender, 1,000 queued per target).
GUARD_OFF = (
    "--sender-rate-per-s", "0", "--sender-burst", "0", "--max-queued-per-target", "0",
    "--caller-rate-per-s", "0", "--caller-burst", "0", "--max-queued-bytes", "0",
)  # fmt: skip
# ...nor the conversation brakes: the benches send numbered payloads to one target far
# faster than 30 a minute, which the pair brakes would hold for a person.
BRAKES_OFF = (
    "--max-hops-per-thread", "0", "--max-pair-messages-per-minute", "0",
    "--max-repeats-per-pair", "0",
)  # fmt: skip


# -- the machine -----------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown CPU" where there is none)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: other work on the machine shows here."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


@dataclass(frozen=True)
class Cpus:
    """Where things run: the measured process on ``daemon``, the load and the bench on
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


def pinning(cpus: set[int]) -> Callable[[], None]:
    """A ``preexec_fn`` that pins a child process to ``cpus`` before it runs anything."""
    return lambda: os.sched_setaffinity(0, cpus)


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


def machine_line(cpus: Cpus | None = None, measured: str = "pigeond") -> str:
    """``machine: cores, CPU, Python, Linux``; with ``cpus``, where ``measured`` ran."""
    line = (
        f"machine: {os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()},"
        f" Linux {platform.release()}"
    )
    if cpus is None:
        return line
    placement = (
        f"{measured} pinned to CPU {sorted(cpus.daemon)}; the load and the bench on CPU"
        f" {sorted(cpus.others)}"
        if cpus.pinned
        else "one CPU: nothing pinned"
    )
    return f"{line}; {placement}"


def source_line(src: Path | None = None) -> str:
    """Which pigeond ran: ``src`` (through PYTHONPATH), or this checkout's commit and how
    many files under pigeond/ differ from it."""
    if src is not None:
        return f"pigeond: from {src} (PYTHONPATH)"

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "--no-optional-locks", "-C", str(ROOT), *args],
            capture_output=True, text=True, check=False,
        ).stdout.strip()  # fmt: skip

    changed = git("status", "--porcelain", "--", "pigeond").splitlines()
    state = f", {len(changed)} uncommitted change(s) under pigeond/" if changed else ", clean"
    return f"pigeond: this checkout at {git('log', '-1', '--format=%h %s')[:80]}{state}"


def header(
    title: str, lines: Sequence[str], load_at_start: str, src: Path | None = None
) -> list[str]:
    """A table's heading: ``title``, then ``lines`` (the machine first), the load average
    at the start and now, and which pigeond ran (:func:`source_line`), as a markdown list."""
    loads = f"load average (1/5/15 min) at start: {load_at_start}; at end: {load_average()}"
    items = [*lines, loads, source_line(src)]
    return [f"## {title}", "", *(f"- {line}" for line in items), ""]


# -- a bench's start -------------------------------------------------------------------------


def arguments(
    doc: str | None, *, quick: str = "shorter runs, as a smoke check", runs: int | None = 3
) -> argparse.ArgumentParser:
    """The options every table takes: ``--quick`` (smaller sizes) and, unless ``runs`` is
    None, ``--runs`` (at least 3: a median of fewer says nothing of the spread)."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    if runs is not None:
        parser.add_argument("--runs", type=int, default=runs, help=f"runs (default {runs})")
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """The options; a ``--runs`` under 3 is refused."""
    args = parser.parse_args(argv)
    if getattr(args, "runs", None) is not None and args.runs < 3:
        parser.error("--runs must be at least 3")
    return args


@dataclass(frozen=True)
class Sizes:
    """How big a bench's runs are: how many (``--runs``); each bench adds its own sizes."""

    runs: int = 3


S = TypeVar("S", bound=Sizes)


def sized(args: argparse.Namespace, full: S, quick: S) -> S:
    """The sizes of this run: ``quick`` with ``--quick``, else ``full``; with ``--runs``."""
    return dataclasses.replace(quick if args.quick else full, runs=args.runs)


def take_machine() -> tuple[Cpus, str]:
    """Set this bench up to measure: SIGTERM stops it as Ctrl-C does (the ``finally`` blocks
    stop every process it started), it keeps off the measured process's CPU, and the load
    average is taken before it starts.  The CPUs, and that load average."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    cpus = machine_cpus()
    os.sched_setaffinity(0, cpus.others)
    return cpus, load_average()


def progress(text: str) -> None:
    """A line on stderr while the bench runs (the table goes to stdout)."""
    print(f"# {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A temporary folder for one run's database and sockets, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=f"pigeond-bench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- processes -------------------------------------------------------------------------------


def bench_command(module: str, *args: str) -> list[str]:
    """The command that runs ``bench/<module>.py`` in a child process; run it with
    ``cwd=ROOT``, where ``bench`` and ``testkit`` import."""
    return [sys.executable, "-m", f"bench.{module}", *args]


@contextlib.contextmanager
def running(
    daemon: DaemonProcess, timeout_s: float = DAEMON_START_TIMEOUT_S
) -> Iterator[DaemonProcess]:
    """Start ``daemon``; whatever happens, it is stopped (SIGTERM, then SIGKILL) after."""
    daemon.start(timeout_s=timeout_s)
    try:
        yield daemon
    finally:
        if daemon.running:
            daemon.stop(timeout_s=DAEMON_STOP_TIMEOUT_S)


# -- figures ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of ``values``, nearest rank; NaN of none."""
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else float("nan")


def median_range(values: Sequence[float], fmt: str = "{:,.1f}") -> str:
    """``median (min-max)`` of the runs."""
    return (
        f"{fmt.format(statistics.median(values))}"
        f" ({fmt.format(min(values))}-{fmt.format(max(values))})"
    )


def spread(values: Sequence[float], show: Callable[[float], str] = "{:.1f}".format) -> str:
    """``median [min .. max]`` of the runs."""
    return f"{show(statistics.median(values))} [{show(min(values))} .. {show(max(values))}]"


def ratio_range(base: Sequence[float], other: Sequence[float]) -> str:
    """``other``'s median over ``base``'s, and the range of the ratios of the runs taken
    side by side: ``1.23x (1.10-1.31x)``; ``-`` where ``base`` has a run of 0."""
    if min(base) <= 0:
        return "-"
    paired = [o / b for b, o in zip(base, other, strict=True)]
    value = statistics.median(other) / statistics.median(base)
    return f"{value:.2f}x ({min(paired):.2f}-{max(paired):.2f}x)"


def markdown_table(
    head: Sequence[str], rows: Iterable[Sequence[str]], align: Sequence[str] = ()
) -> list[str]:
    """A markdown table: ``head``, its rule (``align``: each column's, ``---`` where not
    given; ``---:`` aligns right), then ``rows``."""
    rule = [*align, *["---"] * (len(head) - len(align))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


# -- calls timed in slices -------------------------------------------------------------------


def calls_per_slice(query: Callable[[], object], slice_s: float) -> int:
    """How many calls of ``query`` fit in ``slice_s`` seconds (at least 3)."""
    query()  # warm the page cache and the statement cache
    start = time.perf_counter()
    query()
    once = max(time.perf_counter() - start, 1e-7)
    return max(3, min(2_000, int(slice_s / once)))


def time_calls(query: Callable[[], object], calls: int, into: list[float]) -> None:
    """Append the µs of each of ``calls`` calls of ``query`` to ``into``."""
    for _ in range(calls):
        start = time.perf_counter()
        query()
        into.append((time.perf_counter() - start) * 1e6)


def per_run_medians(
    calls: Sequence[Callable[[], object]], runs: int, budget_s: float, rounds: int = 10
) -> list[list[float]]:
    """For each call, the median seconds of one call in each of ``runs`` runs.  Within a
    run the calls take turns in ``rounds`` short slices, so that a noisy moment of the
    machine falls on all of them rather than on one."""
    slice_s = budget_s / rounds
    per_slice = [calls_per_slice(call, slice_s) for call in calls]
    medians: list[list[float]] = [[] for _ in calls]
    for _ in range(runs):
        samples: list[list[float]] = [[] for _ in calls]
        for _ in range(rounds):
            for call, n, into in zip(calls, per_slice, samples, strict=True):
                time_calls(call, n, into)
        for run_medians, micros in zip(medians, samples, strict=True):
            run_medians.append(statistics.median(micros) / 1e6)
    return medians


def duration(seconds: float) -> str:
    """``12.3 µs``, ``4.56 ms`` or ``1.23 s``."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


@dataclass(frozen=True)
class Comparison:
    """One row of a table of medians: a call's per-run medians (seconds) on the measured
    database against the same call on a baseline, and the target, if any."""

    name: str
    target_s: float | None
    measured: list[float]
    baseline: list[float]
    baseline_name: str = ""

    def row(self) -> str:
        """``| name | measured | target | baseline | measured/baseline | met |``, each cell
        the median [range] over runs; the ratio is taken within each run."""
        ratios = [m / b for m, b in zip(self.measured, self.baseline, strict=True)]
        target, met = "—", "—"
        if self.target_s is not None:
            target = f"≤ {duration(self.target_s)}"
            met = "yes" if statistics.median(self.measured) <= self.target_s else "**NO**"
        baseline = spread(self.baseline, duration)
        if self.baseline_name:
            baseline += f" ({self.baseline_name})"
        cells = [self.name, spread(self.measured, duration), target, baseline,
                 spread(ratios, "{:.2f}".format), met]  # fmt: skip
        return "| " + " | ".join(cells) + " |"
