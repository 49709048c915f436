"""What an idle pigeond costs the machine: CPU and wake-ups over a quiet window.

    .venv/bin/python -m bench.idle_table [--window 20] [--runs 3] [--no-strace]

Idle is nothing queued, nothing owed, no request: what a user's daemon does most of the
day.  Measured as a user would see it, from outside the process: the CPU time of all its
threads and their context switches over a quiet window (default 20 s; ``--window 60``
for the minute the goal is stated over), in two set-ups:

* **with opencode**: a real opencode 1.18.33 (offline, on the fake LLM: testkit/), idle,
  and pigeond's event stream connected to it (``/health`` says so before the window);
* **without opencode**: nothing listens at the opencode URL (an opencode not started).

The baseline, measured in the same run, is the floor of any Twisted daemon with a 500 ms
tick: a bare reactor process with one 500 ms ``LoopingCall`` doing nothing; each pigeond
figure is also given as a ratio to it.  pigeond runs at its default tick (500 ms).

Figures per run, from /proc: CPU % of one core (the ``schedstat`` run time of every
thread, in ns: /proc/<pid>/stat's clock ticks are 10 ms, as coarse as the goal over 20 s),
context switches per second (voluntary and involuntary, summed over
/proc/<pid>/task/*/status).  Then, unless ``--no-strace``, one more window under
``strace -f -c`` (after the measured one: strace slows what it traces) counts the
event loop's wake-ups (``epoll_wait`` returns) and ``futex`` calls (a thread handing work
to another) per second.  Each figure is the median of the runs with its range.  The goal:
at most 0.05 % of a core and 3 wake-ups a second.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench import harness
from testkit.daemon_process import DaemonProcess
from testkit.fake_llm import FakeLLM
from testkit.opencode_dist import OPENCODE_1_18, ensure_opencode
from testkit.opencode_server import OpencodeServer
from testkit.polling import wait_until

GOAL_CPU_PCT = 0.05
GOAL_WAKEUPS_PER_S = 3.0
SETTLE_S = 3.0  # after the start's own work (migrations, first reads, the first connects)
# what testkit's DaemonProcess sets for the tests, back at the defaults a user runs
DEFAULTS = ("--delivery", "turn", "--batch-max", "10")
FLOOR = (
    "from twisted.internet import reactor, task\n"
    "task.LoopingCall(lambda: None).start(0.5)\n"
    "print('ready', flush=True)\n"
    "reactor.run()\n"
)


@dataclass
class Figures:
    """One set-up's figures, one value per run."""

    cpu_pct: list[float] = field(default_factory=list)
    switches_per_s: list[float] = field(default_factory=list)
    wakeups_per_s: list[float] = field(default_factory=list)
    futex_per_s: list[float] = field(default_factory=list)


def run_ns(pid: int) -> int:
    """Nanoseconds on a CPU of every thread of ``pid`` so far (their schedstat)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total


def switches(pid: int) -> int:
    """Voluntary and involuntary context switches of every thread of ``pid`` so far."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split(":")[1])
    return total


def measure_window(pid: int, window_s: float, into: Figures) -> None:
    """CPU % and context switches per second of ``pid`` over ``window_s``."""
    ns0, sw0, t0 = run_ns(pid), switches(pid), time.monotonic()
    time.sleep(window_s)
    ns1, sw1, t1 = run_ns(pid), switches(pid), time.monotonic()
    into.cpu_pct.append((ns1 - ns0) / 1e9 / (t1 - t0) * 100)
    into.switches_per_s.append((sw1 - sw0) / (t1 - t0))


SUMMARY_LINE = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


def strace_window(pid: int, window_s: float, into: Figures) -> None:
    """``epoll_wait`` and ``futex`` calls a second of ``pid``'s threads, under strace."""
    proc = subprocess.Popen(
        ["strace", "-f", "-c", "-e", "trace=epoll_wait,epoll_pwait,futex", "-p", str(pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(window_s)
    proc.send_signal(2)
    _, report = proc.communicate(timeout=30)
    calls = {}
    for line in report.splitlines():
        found = SUMMARY_LINE.match(line)
        if found:
            calls[found.group(2)] = int(found.group(1))
    into.wakeups_per_s.append((calls.get("epoll_wait", 0) + calls.get("epoll_pwait", 0)) / window_s)
    into.futex_per_s.append(calls.get("futex", 0) / window_s)


def measure(pid: int, window_s: float, traced: bool, into: Figures) -> None:
    measure_window(pid, window_s, into)
    if traced:
        strace_window(pid, min(window_s, 10.0), into)


@contextlib.contextmanager
def floor_process(cpus: harness.Cpus) -> Iterator[int]:
    """The bare reactor with one 500 ms LoopingCall; its pid."""
    proc = subprocess.Popen(
        [sys.executable, "-c", FLOOR], stdout=subprocess.PIPE, text=True,
        preexec_fn=harness.pinning(cpus.daemon),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def event_stream_up(daemon: DaemonProcess) -> bool:
    status, health = daemon.request_json("GET", "/health")
    return status == 200 and health.get("event_stream") == "connected"


@contextlib.contextmanager
def pigeond(workdir: Path, opencode_url: str, cpus: harness.Cpus) -> Iterator[DaemonProcess]:
    """A pigeond at its default tick on a fresh SQLite file, pinned to the daemon's CPU."""
    daemon = DaemonProcess(
        workdir, workdir / "p.db", opencode_url=opencode_url, tick_ms=500,
        extra_args=DEFAULTS,
    )  # fmt: skip
    with harness.running(daemon):
        harness.pin_tasks(daemon.pid, cpus.daemon)
        yield daemon


def main(argv: list[str] | None = None) -> None:
    parser = harness.arguments(__doc__, quick="5 s windows, as a smoke check")
    parser.add_argument("--window", type=float, default=None, help="seconds measured (20)")
    parser.add_argument("--no-strace", action="store_true", help="no wake-up counts")
    args = harness.parse(parser, argv)
    window_s = args.window or (5.0 if args.quick else 20.0)
    traced = not args.no_strace and shutil.which("strace") is not None
    cpus, load_at_start = harness.take_machine()
    results = {name: Figures() for name in ("floor", "with opencode", "without opencode")}
    with contextlib.ExitStack() as stack:
        workdir = stack.enter_context(harness.scratch_dir("idle"))
        llm = stack.enter_context(FakeLLM())
        harness.progress(f"starting opencode {OPENCODE_1_18}")
        opencode = OpencodeServer(
            ensure_opencode(OPENCODE_1_18), version=OPENCODE_1_18,
            state_dir=workdir / "opencode", llm_base_url=llm.base_url,
        )  # fmt: skip
        stack.enter_context(opencode)  # starts it
        for run in range(args.runs):
            harness.progress(f"run {run + 1}/{args.runs}: floor")
            with floor_process(cpus) as pid:
                time.sleep(SETTLE_S)
                measure(pid, window_s, traced, results["floor"])
            harness.progress(f"run {run + 1}/{args.runs}: pigeond with opencode")
            with pigeond(workdir / f"with-{run}", opencode.url, cpus) as daemon:
                wait_until(lambda: event_stream_up(daemon), 30, "the event stream")
                time.sleep(SETTLE_S)
                measure(daemon.pid, window_s, traced, results["with opencode"])
                if not event_stream_up(daemon):
                    raise SystemExit("the event stream dropped during the window")
            harness.progress(f"run {run + 1}/{args.runs}: pigeond without opencode")
            with pigeond(workdir / f"without-{run}", "http://127.0.0.1:9", cpus) as daemon:
                time.sleep(SETTLE_S)
                measure(daemon.pid, window_s, traced, results["without opencode"])
    show(results, args.runs, window_s, traced, cpus, load_at_start)


def show(
    results: dict[str, Figures], runs: int, window_s: float, traced: bool,
    cpus: harness.Cpus, load_at_start: str,
) -> None:  # fmt: skip
    lines = harness.header(
        "Idle: CPU and wake-ups of a quiet pigeond",
        [harness.machine_line(cpus), f"{runs} runs of a {window_s:g} s window each"
         + ("; wake-ups from a further window of at most 10 s under strace" if traced else "")],
        load_at_start,
    )  # fmt: skip
    floor = results["floor"]
    rows = []
    for name, got in results.items():
        cells = [
            name,
            harness.median_range(got.cpu_pct, "{:.3f}"),
            "—" if got is floor else harness.ratio_range(floor.cpu_pct, got.cpu_pct),
            harness.median_range(got.switches_per_s, "{:.1f}"),
            "—" if got is floor else harness.ratio_range(floor.switches_per_s, got.switches_per_s),
        ]
        if traced:
            cells += [harness.median_range(got.wakeups_per_s, "{:.1f}"),
                      harness.median_range(got.futex_per_s, "{:.1f}")]  # fmt: skip
        rows.append(cells)
    head = ["process", "CPU % of a core", "/ floor", "context switches/s", "/ floor"]
    if traced:
        head += ["epoll_wait/s", "futex/s"]
    table = harness.markdown_table(head, rows, ["---", *["---:"] * (len(head) - 1)])
    print("\n".join([*lines, *table, ""]))
    for name in ("with opencode", "without opencode"):
        got = results[name]
        cpu = sorted(got.cpu_pct)[len(got.cpu_pct) // 2]
        verdict = [f"CPU {cpu:.3f} % (goal <= {GOAL_CPU_PCT} %)"]
        if traced:
            wakeups = sorted(got.wakeups_per_s)[len(got.wakeups_per_s) // 2]
            verdict.append(f"{wakeups:.1f} wake-ups/s (goal <= {GOAL_WAKEUPS_PER_S:g})")
        met = cpu <= GOAL_CPU_PCT and (not traced or wakeups <= GOAL_WAKEUPS_PER_S)
        print(f"- {name}: {', '.join(verdict)}: {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
