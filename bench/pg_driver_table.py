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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from twisted.internet.defer import Deferred, gatherResults

from bench import harness
from bench import pg_backend as pg
from bench.harness import (
    Cpus,
    Sizes,
    arguments,
    bench_command,
    markdown_table,
    parse,
    progress,
    ratio_range,
    sized,
    take_machine,
)

VARIANTS = ("threads", "asyncio")
CALLERS = 16
PAYLOAD = "x" * 500
WARMUP_CALLS = 50
CHILD_SLACK_S = 60.0  # beyond its scenarios' limits, before a child is killed
SCENARIOS = ("sequential", "one_connection", "own_connections")


@dataclass(frozen=True)
class Size(Sizes):
    calls: int = 5_000  # per scenario
    limit_s: float = 10.0  # per scenario


QUICK = Size(calls=300, limit_s=3.0)


def schema(table: str) -> str:
    return (
        f"CREATE TABLE {table} (msg_id text PRIMARY KEY, from_session text NOT NULL,"
        " to_session text NOT NULL, kind text NOT NULL, payload text NOT NULL,"
        " created_at bigint NOT NULL, expires_at bigint NOT NULL)"
    )


def insert_sql(table: str) -> str:
    return (
        f"INSERT INTO {table} (msg_id, from_session, to_session, kind, payload, created_at,"
        " expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
    )


def row(msg_id: str) -> tuple[str, str, str, str, str, int, int]:
    now = time.time_ns() // 1_000_000
    return (msg_id, "ses_sender", "ses_target", "chat", PAYLOAD, now, now + 86_400_000)


# -- the client process (one variant) ---------------------------------------------------------

Call = Callable[[], "Deferred[None]"]


@dataclass
class Budget:
    """Calls left and a deadline, shared by the callers of one window."""

    left: int
    deadline: float

    def take(self) -> bool:
        if self.left <= 0 or time.monotonic() >= self.deadline:
            return False
        self.left -= 1
        return True


@dataclass(frozen=True)
class Figures:
    calls: int
    seconds: float
    calls_per_s: float
    p50_ms: float
    p95_ms: float
    cpu_us: float  # client process CPU per call


async def caller(call: Call, budget: Budget, latencies: list[float]) -> None:
    while budget.take():
        started = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - started)


async def window(calls: Sequence[Call], count: int, limit_s: float) -> Figures:
    """``calls``: one per caller, all at once; a warm-up, then the measured window."""
    warmup = Budget(WARMUP_CALLS, time.monotonic() + limit_s)
    await gatherResults([Deferred.fromCoroutine(caller(c, warmup, [])) for c in calls])
    latencies: list[float] = []
    budget = Budget(count, time.monotonic() + limit_s)
    cpu, started = time.process_time(), time.perf_counter()
    await gatherResults([Deferred.fromCoroutine(caller(c, budget, latencies)) for c in calls])
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    done = max(len(latencies), 1)
    return Figures(
        calls=len(latencies),
        seconds=seconds,
        calls_per_s=len(latencies) / seconds,
        p50_ms=1e3 * harness.percentile(latencies, 0.5),
        p95_ms=1e3 * harness.percentile(latencies, 0.95),
        cpu_us=1e6 * cpu / done,
    )


def sync_transaction(conn: psycopg.Connection[Any], sql: str, msg_id: str) -> None:
    """pigeond's shape: an autocommit connection, explicit BEGIN and COMMIT."""
    conn.execute("BEGIN")
    conn.execute(sql, row(msg_id))
    conn.execute("COMMIT")


async def async_transaction(conn: psycopg.AsyncConnection[Any], sql: str, msg_id: str) -> None:
    await conn.execute("BEGIN")
    await conn.execute(sql, row(msg_id))
    await conn.execute("COMMIT")


async def threads_variant(reactor: Any, url: str, table: str, size: Size) -> dict[str, Figures]:
    from twisted.internet.threads import deferToThreadPool
    from twisted.python.threadpool import ThreadPool

    sql, ids = insert_sql(table), (f"t{n}" for n in itertools.count())
    conns = [psycopg.connect(url, autocommit=True, connect_timeout=10) for _ in range(CALLERS)]
    writer = ThreadPool(1, 1, name="writer")
    many = ThreadPool(CALLERS, CALLERS, name="callers")
    writer.start()
    many.start()

    def on(pool: ThreadPool, conn: psycopg.Connection[Any]) -> Call:
        return lambda: deferToThreadPool(reactor, pool, sync_transaction, conn, sql, next(ids))

    try:
        return {
            "sequential": await window([on(writer, conns[0])], size.calls, size.limit_s),
            "one_connection": await window(
                [on(writer, conns[0])] * CALLERS, size.calls, size.limit_s
            ),
            "own_connections": await window([on(many, c) for c in conns], size.calls, size.limit_s),
        }
    finally:
        writer.stop()
        many.stop()
        for conn in conns:
            conn.close()


async def asyncio_variant(reactor: Any, url: str, table: str, size: Size) -> dict[str, Figures]:
    def deferred(coro: Coroutine[Any, Any, Any]) -> Deferred[Any]:
        return Deferred.fromFuture(asyncio.ensure_future(coro))

    sql, ids = insert_sql(table), (f"a{n}" for n in itertools.count())
    conns: list[psycopg.AsyncConnection[Any]] = [
        await deferred(psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10))
        for _ in range(CALLERS)
    ]
    lock = asyncio.Lock()

    async def locked(conn: psycopg.AsyncConnection[Any], msg_id: str) -> None:
        async with lock:  # one transaction at a time on the shared connection
            await async_transaction(conn, sql, msg_id)

    def on(conn: psycopg.AsyncConnection[Any]) -> Call:
        return lambda: deferred(async_transaction(conn, sql, next(ids)))

    def shared(conn: psycopg.AsyncConnection[Any]) -> Call:
        return lambda: deferred(locked(conn, next(ids)))

    try:
        return {
            "sequential": await window([on(conns[0])], size.calls, size.limit_s),
            "one_connection": await window([shared(conns[0])] * CALLERS, size.calls, size.limit_s),
            "own_connections": await window([on(c) for c in conns], size.calls, size.limit_s),
        }
    finally:
        for conn in conns:
            await deferred(conn.close())


def child(variant: str, url: str, table: str, size: Size, cpus: set[int]) -> None:
    """One variant in this process: install its reactor, measure, print JSON figures."""
    os.sched_setaffinity(0, cpus)  # before any thread: the pools inherit it
    if variant == "asyncio":
        from twisted.internet import asyncioreactor

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        asyncioreactor.install(loop)
    from twisted.internet import reactor as installed
    from twisted.internet.task import react

    reactor: Any = installed
    measure = threads_variant if variant == "threads" else asyncio_variant
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(schema(table))

    async def run(_: Any) -> None:
        found = await measure(reactor, url, table, size)
        print(json.dumps({k: asdict(v) for k, v in found.items()}), flush=True)

    try:
        react(lambda r: Deferred.fromCoroutine(run(r)))
    finally:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")


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
