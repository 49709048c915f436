"""Memory stays flat: pigeond's RSS after 1,000,000 messages against after 10,000.

    .venv/bin/python -m bench.memory_table [--quick] [--messages N] [--runs N]
        [--tracemalloc | --heap]

Each run starts a fresh pigeond (its defaults: ``turn`` delivery, batches of up to 10,
verification every 2 s, retention 30 days, info log to a pipe; the flood guard off) and
a fresh stand-in opencode (bench/standin_opencode.py, answering at once), and sends
``--messages`` messages (500-byte payloads, 10 senders, 100 targets) over 32 keep-alive
connections as fast as they are answered, holding back while more than 2,000 accepted
messages wait to be handed off, so what is measured is a daemon keeping up, not a
growing queue.  Every message is accepted *and* handed off (the stand-in counts them).

The daemon's ``VmRSS`` (/proc/<pid>/status, with its anonymous and file-backed parts)
is read when the stand-in has been handed 10,000 messages (the baseline), then at
checkpoints up to the last; the figure is RSS at the end over RSS at the baseline.
With retention at 30 days nothing is pruned during a run, so the database grows by
every message (its size is shown): RSS must not follow it.

Bounded: a run that has not handed off every message within ``--messages / 300`` s
plus 2 minutes (``/ 40`` with ``--tracemalloc``) fails loudly.  Only 127.0.0.1.
``--quick`` is a smoke check of under a minute (10,000 messages, baseline at 1,000).
``--tracemalloc`` runs the daemon with tracemalloc on and prints the lines whose
allocations grew most between the baseline and the end (slower: for finding a leak,
not for the figure; allocations by SQLite itself are not traced).  ``--heap`` has the
daemon tell, at every sample, what SQLite holds, what malloc holds (in use and free),
pymalloc's arenas and Python's object count.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass, field, replace

from bench import handoff_rig as rig
from bench import harness
from bench.harness import Cpus, Sizes, arguments, progress, scratch_dir, take_machine
from bench.memory_probe import (
    HEAP_LAUNCHER,
    TRACE_LAUNCHER,
    Probe,
    checkpoints,
    growth_report,
    heap_rows,
)

CONNECTIONS = 32
MAX_BACKLOG = 2000  # accepted but not yet handed off, before the sender holds back
FLOOR_RATE = 300.0  # msg/s below which a run counts as stuck (the time cap)
TRACED_FLOOR_RATE = 40.0  # the same under tracemalloc, which slows the daemon down


@dataclass(frozen=True)
class Size(Sizes):
    messages: int = 1_000_000
    baseline: int = 10_000


QUICK = Size(messages=10_000, baseline=1_000)


@dataclass
class Run:
    samples: list[tuple[int, dict[str, int]]] = field(default_factory=list)  # (handed off, kB)
    wall_s: float = 0.0
    db_bytes: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    growth: list[str] = field(default_factory=list)
    heap: list[dict[str, int]] = field(default_factory=list)  # one per sample, with --heap

    def rss(self, at: int) -> int:
        return next(kb["VmRSS"] for n, kb in self.samples if n >= at)

    @property
    def ratio(self) -> float:
        return self.samples[-1][1]["VmRSS"] / self.rss(self.samples[0][0])


async def drive(daemon: rig.BenchDaemon, probe: Probe, size: Size, limit_s: float) -> rig.Sending:
    """Send every message, holding back while the backlog is over MAX_BACKLOG, while the
    probe samples RSS at its checkpoints."""
    # message i goes to target (i * 7919) mod 100: every target, not in round-robin order
    targets = [rig.target_name((i * 7919) % rig.TARGETS) for i in range(rig.TARGETS)]

    def plan(index: int) -> tuple[float, str] | None:
        if index >= size.messages:
            return None
        backlog = index - probe.handed_off
        due = time.monotonic() + (0.02 if backlog > MAX_BACKLOG else 0.0)
        return due, targets[index % rig.TARGETS]

    watcher = asyncio.ensure_future(probe.watch(size.messages, limit_s))
    try:
        try:
            sending = await rig.send_plan(
                daemon.port,
                daemon.token,
                plan,
                connections=CONNECTIONS,
                limit_s=limit_s,
                keep=False,
            )
            await asyncio.wait_for(watcher, limit_s)
        except TimeoutError as e:
            raise RuntimeError(
                f"run stopped after {limit_s:,.0f} s with {probe.handed_off:,} of"
                f" {size.messages:,} messages handed off: pigeond is stuck or too slow"
            ) from e
    finally:
        watcher.cancel()
    return sending


def one_run(size: Size, cpus: Cpus, args: argparse.Namespace) -> Run:
    trace, heap = args.tracemalloc, args.heap
    daemon_env = dict(item.split("=", 1) for item in args.daemon_env)
    limit_s = size.messages / (TRACED_FLOOR_RATE if trace else FLOOR_RATE) + 120
    launcher = TRACE_LAUNCHER if trace else HEAP_LAUNCHER if heap else None
    with (
        scratch_dir("memory") as workdir,
        rig.standin(workdir, cpus) as standin,
        rig.daemon(
            workdir,
            standin.url,
            cpus,
            args.daemon_arg,
            launcher=launcher,
            env=daemon_env | ({"BENCH_TRACE_DIR": str(workdir)} if launcher else {}),
        ) as daemon,
    ):
        rig.prime(daemon.port, daemon.token, standin, [rig.target_name(k) for k in range(100)])
        probe = Probe(standin, daemon.pid, checkpoints(size.baseline, size.messages),
                      trace_dir=workdir if launcher else None, heap=heap)  # fmt: skip
        started = time.monotonic()
        sending = asyncio.run(drive(daemon, probe, size, limit_s))
        run = Run(probe.samples, time.monotonic() - started)
        run.statuses = dict(sending.statuses)
        run.db_bytes = sum(p.stat().st_size for p in workdir.glob("pigeond.db*"))
        if trace:
            run.growth = growth_report(workdir)
        if heap:
            run.heap = heap_rows(workdir)
    return run


# -- the table -------------------------------------------------------------------------------


def mb(kb: float) -> float:
    return kb / 1024


def table(runs: list[Run], size: Size) -> list[str]:
    ratios = [r.ratio for r in runs]
    verdict = "pass" if statistics.median(ratios) <= 1.10 else "**FAIL**"
    base = [mb(r.rss(size.baseline)) for r in runs]
    end = [mb(r.samples[-1][1]["VmRSS"]) for r in runs]
    peak = [mb(max(kb["VmRSS"] for _, kb in r.samples)) for r in runs]
    anon = [mb(r.samples[-1][1]["RssAnon"] - r.samples[0][1]["RssAnon"]) for r in runs]
    rate = [size.messages / r.wall_s for r in runs]
    bad = sum(n for r in runs for status, n in r.statuses.items() if status != 202)
    return [
        "| figure | median (range) of runs | target | pass |",
        "|---|---|---|---|",
        f"| RSS after {size.messages:,} / after {size.baseline:,} messages |"
        f" {harness.median_range(ratios, '{:.3f}')} | <= 1.10 | {verdict} |",
        f"| RSS after {size.baseline:,} messages (MB) | {harness.median_range(base)} | - | - |",
        f"| RSS after {size.messages:,} messages (MB) | {harness.median_range(end)} | - | - |",
        f"| highest RSS sampled (MB) | {harness.median_range(peak)} | - | - |",
        f"| anonymous RSS, end minus baseline (MB) | {harness.median_range(anon)} | - | - |",
        f"| accepted and handed off, msg/s (whole run) | {harness.median_range(rate, '{:,.0f}')}"
        " | - | - |",
        f"| run time (s) | {harness.median_range([r.wall_s for r in runs], '{:,.0f}')} | - | - |",
        f"| database + WAL at the end (MB) |"
        f" {harness.median_range([r.db_bytes / 2**20 for r in runs], '{:,.0f}')} | - | - |",
        f"| non-202 answers (all runs) | {bad} | 0 | {'pass' if bad == 0 else '**FAIL**'} |",
    ]


HEAP_COLUMNS = " SQLite (MB) | malloc in use / free / mmapped (MB) | pymalloc arenas | objects |"


def series(run: Run) -> list[str]:
    """RSS at every checkpoint of one run (the median one); with --heap, what holds it."""
    head = "| handed off | VmRSS (MB) | RssAnon (MB) | RssFile (MB) |"
    lines = [head + (HEAP_COLUMNS if run.heap else ""), "|---" * (8 if run.heap else 4) + "|"]
    for i, (n, kb) in enumerate(run.samples):
        line = (f"| {n:,} | {kb['VmRSS'] / 1024:.1f} | {kb['RssAnon'] / 1024:.1f}"
                f" | {kb['RssFile'] / 1024:.1f} |")  # fmt: skip
        if i < len(run.heap):
            h = run.heap[i]
            line += (f" {h['sqlite'] / 2**20:.1f} | {h['malloc_in_use'] / 2**20:.1f} /"
                     f" {h['malloc_free'] / 2**20:.1f} / {h['malloc_mmap'] / 2**20:.1f}"
                     f" | {h['pymalloc_arenas']:,} | {h['objects']:,} |")  # fmt: skip
        lines.append(line)
    return lines


def notes(size: Size) -> list[str]:
    return [
        "- pigeond with its defaults (`--delivery turn --batch-max 10`, tick 500 ms,"
        " verify every 2 s, `--retention-days 30`: nothing is pruned in a run) and the"
        " flood guard off (`" + " ".join(harness.GUARD_OFF) + "`).",
        f"- Load: {CONNECTIONS} keep-alive connections, as fast as answered, held back"
        f" while over {MAX_BACKLOG:,} accepted messages wait; {rig.SENDERS} senders,"
        f" {rig.TARGETS} targets, {rig.PAYLOAD_BYTES}-byte payloads; the stand-in answers at"
        " once and keeps 256 prompts per session.",
        "- RSS sampled from /proc/<pid>/status when the stand-in's count of handed-off"
        " messages passed each checkpoint (read every 0.2 s).",
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(__doc__, quick="a smoke check under a minute", runs=None)
    parser.add_argument("--messages", type=int, help="messages per run (default 1,000,000)")
    parser.add_argument("--runs", type=int, help="runs (default 3)")
    parser.add_argument("--tracemalloc", action="store_true", help="show what grew, and where")
    parser.add_argument(
        "--heap", action="store_true", help="SQLite, malloc, pymalloc at each sample"
    )
    parser.add_argument(
        "--daemon-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for pigeond (e.g. MALLOC_ARENA_MAX=2)",
    )
    parser.add_argument(
        "--daemon-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for pigeond (e.g. --daemon-arg=--verify-interval-s=60)",
    )
    return parser.parse_args(argv)  # any --runs: a run here takes minutes


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    size = QUICK if args.quick else Size()
    if args.messages:
        size = replace(
            size, messages=args.messages, baseline=min(size.baseline, args.messages // 10)
        )
    if args.runs:
        size = replace(size, runs=args.runs)
    cpus, load_at_start = take_machine()
    runs = []
    for i in range(size.runs):
        runs.append(one_run(size, cpus, args))
        progress(f"run {i + 1}/{size.runs}: {runs[-1].wall_s:,.0f} s, RSS ratio"
                 f" {runs[-1].ratio:.3f}")  # fmt: skip
    median_run = sorted(runs, key=lambda r: r.ratio)[len(runs) // 2]
    changed = " ".join([*args.daemon_env, *args.daemon_arg]) or "none"
    added = f"added to pigeond's environment and arguments: {changed}"
    lines = [harness.machine_line(cpus), added]
    print("\n".join(harness.header("Memory stays flat", lines, load_at_start)))
    print("\n".join(table(runs, size)) + "\n")
    print("RSS along the median run:\n")
    print("\n".join(series(median_run)) + "\n")
    print("\n".join(notes(size)))
    if median_run.growth:
        print("\nWhere allocations grew (tracemalloc, baseline to end, median run):\n")
        print("\n".join(median_run.growth))


if __name__ == "__main__":
    main()
