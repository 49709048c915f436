"""psycopg under Twisted: synchronous connections in threads against asyncio connections.

    .venv/bin/python -m bench.pg_driver_table [--quick] [--runs N] [--commits durable|fast]

The question of docs/performance.md's "Why psycopg in threads": integrate psycopg 3 with Twisted as
``twisted.enterprise.adbapi`` does (a sync connection per thread, called through
``deferToThreadPool``: what pigeond does), or with psycopg's ``AsyncConnection`` under
Twisted's asyncio reactor?  Each variant runs in a process of its own (each installs its
own reactor), in turns (threads, asyncio, threads, asyncio, ...) so that a slow minute of
the machine hits both; each figure is the median of ``--runs`` (at least 3) runs:

- **threads**: the default reactor; psycopg ``Connection`` (autocommit), each call
  ``deferToThreadPool`` on a thread pool;
- **asyncio**: ``asyncioreactor.install()`` first; psycopg ``AsyncConnection``
  (autocommit), each call ``Deferred.fromFuture(asyncio.ensure_future(coroutine))``.

The call is a write transaction like pigeond's accept: ``BEGIN``; ``INSERT`` one row
(text and bigint columns, a 500-byte payload); ``COMMIT`` (three round trips, as
pigeond's repository sends them).  The same Twisted coroutines drive both variants,
only the call differs; three scenarios per process:

1. **sequential**: one caller, one connection (threads: a 1-thread pool): latency p50
   and p95, the client's CPU per call;
2. **16 callers, one connection**: pigeond's writer (threads: its 1-thread pool; asyncio:
   the connection behind an ``asyncio.Lock``, a transaction at a time): calls/s, CPU;
3. **16 callers, 16 connections** (threads: a 16-thread pool, a connection per thread;
   asyncio: 16 ``AsyncConnection``): calls/s, CPU.

CPU per call: ``time.process_time()`` of the client process (every thread) over the
window, divided by the calls.  PostgreSQL: a private cluster with durable commits
(bench/pg_backend.py: fsync, synchronous_commit, full_page_writes on; ``--commits fast``
turns the three off, so that the disk's flushes do not hide the client's own cost),
over its Unix socket; a fresh table per process.  With 2 CPUs or more the client runs on the first
CPU, PostgreSQL and this script on the others.

Bounded: each scenario has a warm-up, then at most ``calls`` calls and ``limit_s``
seconds (5,000 and 10 s; 300 and 3 s with ``--quick``); each process a time limit.
Prints markdown: the machine, the table.

This module runs the variants in turns and prints the table; each variant's client is
bench/pg_driver_client.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg

from bench import harness
from bench import pg_backend as pg
from bench.harness import (
    Cpus,
    arguments,
    bench_command,
    markdown_table,
    parse,
    progress,
    ratio_range,
    sized,
    take_machine,
)
from bench.pg_driver_client import PAYLOAD, VARIANTS, WARMUP_CALLS, Figures, Size, child

CHILD_SLACK_S = 60.0  # beyond its scenarios' limits, before a child is killed
SCENARIOS = ("sequential", "one_connection", "own_connections")
QUICK = Size(calls=300, limit_s=3.0)


# -- the runs, in turns ----------------------------------------------------------------------

Run = dict[str, Figures]


def one_run(variant: str, url: str, table: str, size: Size, cpus: set[int]) -> Run:
    command = bench_command(
        "pg_driver_table", "--child", variant, "--url", url, "--table", table,
        "--calls", str(size.calls), "--limit-s", str(size.limit_s),
        "--cpus", ",".join(map(str, sorted(cpus))),
    )  # fmt: skip
    limit = len(SCENARIOS) * 2 * size.limit_s + CHILD_SLACK_S  # warm-up and window each
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=limit, check=False, cwd=harness.ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"{variant} run failed ({done.returncode}):\n{done.stderr}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {k: Figures(**found[k]) for k in SCENARIOS}


def measure_all(size: Size, cpus: Cpus, url: str) -> dict[str, list[Run]]:
    runs: dict[str, list[Run]] = {v: [] for v in VARIANTS}
    for i in range(size.runs):
        for variant in VARIANTS:
            started = time.monotonic()
            run = one_run(variant, url, f"bench_{variant}_{i}", size, cpus.daemon)
            runs[variant].append(run)
            s, o, m = run["sequential"], run["one_connection"], run["own_connections"]
            progress(
                f"run {i + 1}/{size.runs} {variant} ({time.monotonic() - started:.0f} s):"
                f" sequential p50 {s.p50_ms:.2f} ms, {s.cpu_us:.0f} µs CPU;"
                f" 16 on 1 connection {o.calls_per_s:,.0f}/s;"
                f" 16 on 16 {m.calls_per_s:,.0f}/s"
            )
    return runs


# -- the table --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    scenario: str
    key: str
    fmt: str


ROWS = [
    Row("sequential: latency p50 (ms)", "sequential", "p50_ms", "{:.2f}"),
    Row("sequential: latency p95 (ms)", "sequential", "p95_ms", "{:.2f}"),
    Row("sequential: client CPU per call (µs)", "sequential", "cpu_us", "{:,.0f}"),
    Row("16 callers, 1 connection (pigeond's writer): calls/s", "one_connection",
        "calls_per_s", "{:,.0f}"),
    Row("16 callers, 1 connection: client CPU per call (µs)", "one_connection", "cpu_us",
        "{:,.0f}"),
    Row("16 callers, 16 connections: calls/s", "own_connections", "calls_per_s", "{:,.0f}"),
    Row("16 callers, 16 connections: latency p50 (ms)", "own_connections", "p50_ms",
        "{:.2f}"),
    Row("16 callers, 16 connections: client CPU per call (µs)", "own_connections", "cpu_us",
        "{:,.0f}"),
]  # fmt: skip


def table(runs: dict[str, list[Run]]) -> list[str]:
    lines = markdown_table(("figure", *VARIANTS, "asyncio / threads (run by run)"), [])
    for r in ROWS:
        values = {v: [float(getattr(run[r.scenario], r.key)) for run in runs[v]] for v in VARIANTS}
        shown = [harness.median_range(values[v], r.fmt) for v in VARIANTS]
        lines.append(
            f"| {r.label} | {shown[0]} | {shown[1]} |"
            f" {ratio_range(values['threads'], values['asyncio'])} |"
        )
    calls = [
        " / ".join(str(sum(run[s].calls for run in runs[v])) for s in SCENARIOS) for v in VARIANTS
    ]
    lines.append(f"| calls measured, all runs (per scenario) | {calls[0]} | {calls[1]} | - |")
    return lines


def header(cpus: Cpus, cluster: pg.DurableCluster, load: str) -> list[str]:
    settings = ", ".join(f"{k}={v}" for k, v in cluster.settings().items())
    version = cluster.psql("SHOW server_version").strip()
    placement = (
        f"client on CPU {sorted(cpus.daemon)}, PostgreSQL and this script on CPU"
        f" {sorted(cpus.others)}"
        if cpus.pinned
        else "one CPU: nothing pinned"
    )
    import twisted

    libpq = psycopg.pq.version()
    return harness.header(
        "psycopg under Twisted: threads against asyncio",
        [
            f"{harness.machine_line()}; {placement}",
            f"psycopg {psycopg.__version__} (libpq {libpq // 10000}.{libpq % 10000},"
            f" {psycopg.pq.__impl__}), Twisted {twisted.__version__}",
            f"PostgreSQL {version}, a private cluster over its Unix socket: {settings}",
        ],
        load,
    )


class FastCluster(pg.DurableCluster):
    """The same cluster with commits that wait for no disk flush (``--commits fast``)."""

    def _server_options(self) -> str:
        return (
            super()
            ._server_options()
            .replace("fsync=on", "fsync=off")
            .replace("synchronous_commit=on", "synchronous_commit=off")
            .replace("full_page_writes=on", "full_page_writes=off")
        )


@contextlib.contextmanager
def private_cluster(commits: str, cpus: set[int]) -> Iterator[pg.DurableCluster]:
    """bench/pg_backend.py's durable cluster, or its fast twin, pinned to ``cpus``."""
    with pg.durable_cluster(cpus, pg.DurableCluster if commits == "durable" else FastCluster) as c:
        yield c


def notes(size: Size, commits: str) -> list[str]:
    return [
        "",
        f"- {size.runs} runs, threads and asyncio in turns, each in a fresh process;"
        " medians (range) of the runs; the ratio is asyncio's median over threads', with"
        " the range of the ratios of runs taken side by side.",
        f"- a call: BEGIN; INSERT one row (5 text, 2 bigint, a {len(PAYLOAD)}-byte payload);"
        f" COMMIT ({'durable' if commits == 'durable' else 'fast: no flush'} commits);"
        " per scenario"
        f" {WARMUP_CALLS} warm-up calls, then at most {size.calls:,} calls or"
        f" {size.limit_s:g} s.",
        "- threads: `deferToThreadPool` on a 1-thread pool (sequential, and 16 callers on 1"
        " connection: pigeond's writer) or a 16-thread pool with a connection per thread;"
        " asyncio: `Deferred.fromFuture(asyncio.ensure_future(...))` on 1 AsyncConnection"
        " (16 callers: behind an asyncio.Lock) or 16.",
        "- client CPU: `time.process_time()` of the client process (all its threads) over"
        " the window, per call.",
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(__doc__)
    parser.add_argument(
        "--commits", choices=["durable", "fast"], default="durable",
        help="PostgreSQL's commits wait for their WAL flush (default, as pigeond's) or not",
    )  # fmt: skip
    # one variant in this process (the script runs itself so)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--limit-s", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--cpus", help=argparse.SUPPRESS)
    return parse(parser, argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        size = Size(1, args.calls, args.limit_s)
        child(args.child, args.url, args.table, size, {int(c) for c in args.cpus.split(",")})
        return
    size = sized(args, Size(), QUICK)
    cpus, load_at_start = take_machine()
    with private_cluster(args.commits, cpus.others) as cluster, cluster.database() as url:
        runs = measure_all(size, cpus, url)
        lines = header(cpus, cluster, load_at_start)
    print("\n".join([*lines, *table(runs), *notes(size, args.commits)]))


if __name__ == "__main__":
    main()
