"""SQLite against PostgreSQL: accepts per second and accept -> handed off, in one run.

    .venv/bin/python -m bench.backends_table [--quick] [--runs N] [--pg-cpus daemon|others]

Measures a real pigeond (testkit/daemon_process.py, flood guard off) on each backend, in
turns (SQLite, PostgreSQL, SQLite, PostgreSQL, ...) so that a slow minute of the
machine hits both; each figure the median of ``--runs`` (at least 3) runs with its range:

1. **accepts/s**: ``POST /swarm/send`` flat out from bench/loadgen.py (64 keep-alive
   connections on 127.0.0.1, 500-byte payloads, 2,048 senders to 1,024 targets), a 1 s
   warm-up then a 10 s window (0.5 s and 3 s with ``--quick``), at most 500,000
   requests; nothing delivered (``opencode_url = ""``), as in bench/accept_table.py;
2. **accept -> handed_off**: a fresh pigeond with its delivery defaults against the
   stand-in opencode (bench/standin_opencode.py, answers at once), 100 msg/s round robin
   over 100 targets (each target once a second, so each send finds it idle) for 10 s
   (3 s with ``--quick``); ``handed_off_at - created_at`` of every message, p50 and p95.

SQLite: a fresh file per run in a fresh temporary folder (WAL, ``synchronous=FULL``:
pigeond's own settings).  PostgreSQL: one private cluster for the whole run, started by
this script (bench/pg_backend.py on testkit/pg_cluster.py: initdb + pg_ctl in a temporary
folder, as ``nobody`` when root), restarted with durable commits (fsync,
synchronous_commit, full_page_writes on; the tests turn them off), reached over its
Unix socket; a fresh database per run, dropped after.  With 2 CPUs or more, pigeond
runs pinned to the first CPU and the load, the stand-in and this script to the others;
PostgreSQL's processes on pigeond's CPU (``--pg-cpus daemon``, the default: the same
one core for pigeond and its storage as with SQLite) or on the others.

Bounded: each load has a request count and a time limit (a stuck daemon fails
loudly); only 127.0.0.1 and Unix sockets.  Prints markdown: the machine, the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import accept_load, accept_servers, harness
from bench import handoff_rig as rig
from bench import pg_backend as pg
from bench.harness import (
    Cpus,
    Sizes,
    arguments,
    markdown_table,
    parse,
    progress,
    ratio_range,
    scratch_dir,
    sized,
    take_machine,
)

BACKENDS = ("SQLite", "PostgreSQL")
LATENCY_RATE = 100.0  # msg/s, round robin over rig.TARGETS targets
LATENCY_CONNECTIONS = 16
SETTLE_S = 10.0  # after the last prompt arrived, for its hand-off to be recorded


@dataclass(frozen=True)
class Size(Sizes):
    accept_s: float = 10.0
    warmup_s: float = 1.0
    latency_s: float = 10.0


QUICK = Size(accept_s=3.0, warmup_s=0.5, latency_s=3.0)

Run = dict[str, float]  # one run of one backend: figure key -> value


# -- one run of each kind ------------------------------------------------------------------


@contextlib.contextmanager
def database(backend: str, cluster: pg.DurableCluster, workdir: Path) -> Iterator[Path | str]:
    """A fresh database for one run: a file in ``workdir``, or a new PostgreSQL database."""
    if backend == "SQLite":
        yield workdir / "pigeond.db"
    else:
        with cluster.database() as url:
            yield url


def accept_run(backend: str, cluster: pg.DurableCluster, size: Size, cpus: Cpus) -> Run:
    """pigeond flat out, nothing delivered: bench/accept_table.py's load and figures (from
    bench/accept_load.py); the CPU of PostgreSQL's processes over the same window."""
    pg_cpu: list[float] = []

    def mark() -> None:
        pg_cpu.append(cluster.cpu_seconds())

    load = accept_load.Size(1, size.accept_s, size.warmup_s)
    with scratch_dir("backends") as workdir, database(backend, cluster, workdir) as db:
        daemon = rig.BenchDaemon(
            workdir, db, opencode_url="", tick_ms=rig.TICK_MS, extra_args=harness.GUARD_OFF
        )
        with accept_servers.pigeond_server(daemon, cpus) as server:
            run = accept_load.measure(server, 1, load, cpus, (mark, mark))
    rate = max(run.rate, 1.0)
    pg_cpu_share = (pg_cpu[1] - pg_cpu[0]) / size.accept_s  # one core = 1.0
    return {
        "accepts": run.rate,
        "accept_p50": run.p50_ms,
        "accept_p99": run.p99_ms,
        "pigeond_cpu_us": 1e6 * run.server_cpu / rate,
        "pg_cpu_us": 1e6 * pg_cpu_share / rate if backend != "SQLite" else 0.0,
        "accept_errors": run.non_2xx + run.lost + run.connection_errors,
    }


def read_rows(db: Path | str, msg_ids: Sequence[str]) -> dict[str, rig.Row]:
    if isinstance(db, Path):
        return rig.read_rows(db, msg_ids)
    return pg.read_rows(db, msg_ids)


def settled_rows(db: Path | str, msg_ids: Sequence[str], limit_s: float) -> dict[str, rig.Row]:
    """The rows once every one has its ``handed_off_at`` (the stand-in counts a prompt
    when it arrives, before pigeond records its 204), or as they are after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while True:
        rows = read_rows(db, msg_ids)
        done = sum(r.handed_off_at is not None for r in rows.values())
        if done == len(msg_ids) or time.monotonic() >= deadline:
            return rows
        time.sleep(0.1)


def latency_run(backend: str, cluster: pg.DurableCluster, size: Size, cpus: Cpus) -> Run:
    """A paced stream to idle targets through the stand-in: accept -> handed_off."""
    count = int(LATENCY_RATE * size.latency_s)
    targets = [rig.target_name(k) for k in range(rig.TARGETS)]
    limit_s = 60 + count / 50  # far beyond any rate seen; a stuck daemon fails loudly
    with (
        scratch_dir("backends") as workdir,
        database(backend, cluster, workdir) as db,
        rig.standin(workdir, cpus) as standin,
        rig.daemon(workdir, standin.url, cpus, db=db) as daemon,
    ):
        rig.prime(daemon.port, daemon.token, standin, targets)
        before = standin.stats()["messages"]
        plan = rig.paced(
            time.monotonic(), LATENCY_RATE, [targets[i % len(targets)] for i in range(count)]
        )
        sent = asyncio.run(
            rig.send_plan(daemon.port, daemon.token, plan,
                          connections=LATENCY_CONNECTIONS, limit_s=limit_s)
        ).sent  # fmt: skip
        ok = [s.msg_id for s in sent if s.msg_id is not None]
        rig.wait_for_messages(standin, before + len(ok), limit_s)
        rows = settled_rows(db, ok, SETTLE_S)
    latency = [
        float(r.handed_off_at - r.created_at) for r in rows.values() if r.handed_off_at is not None
    ]
    return {
        "handoff_p50": harness.percentile(latency, 0.5),
        "handoff_p95": harness.percentile(latency, 0.95),
        "handoff_errors": len(sent) - len(latency),  # not a 202, or never handed off
    }


def measure_all(size: Size, cpus: Cpus, cluster: pg.DurableCluster) -> dict[str, list[Run]]:
    """Every run, in turns: run i of SQLite, then of PostgreSQL, for each kind."""
    runs: dict[str, list[Run]] = {b: [] for b in BACKENDS}
    kinds: list[tuple[str, Callable[[str, pg.DurableCluster, Size, Cpus], Run]]] = [
        ("accepts", accept_run), ("latency", latency_run),
    ]  # fmt: skip
    for i in range(size.runs):
        found: dict[str, Run] = {b: {} for b in BACKENDS}
        for kind, one in kinds:
            for backend in BACKENDS:
                started = time.monotonic()
                found[backend] |= one(backend, cluster, size, cpus)
                f = found[backend]
                shown = (f"{f['accepts']:,.0f} accepts/s" if kind == "accepts" else
                         f"accept -> handed_off p50/p95 {f['handoff_p50']:.0f}/"
                         f"{f['handoff_p95']:.0f} ms")  # fmt: skip
                progress(f"run {i + 1}/{size.runs} {backend} {kind}"
                         f" ({time.monotonic() - started:.0f} s): {shown}")  # fmt: skip
        for backend in BACKENDS:
            runs[backend].append(found[backend])
    return runs


# -- the table --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    key: str
    fmt: str
    ratio: bool = True


def rows(size: Size) -> list[Row]:
    window = f"{size.accept_s:g} s"
    paced = f"{LATENCY_RATE:g} msg/s for {size.latency_s:g} s"
    return [
        Row(f"accepted msg/s, flat out (64 connections, {window} window)", "accepts",
            "{:,.0f}"),
        Row("  accept latency under that load, p50 (ms)", "accept_p50", "{:.1f}"),
        Row("  accept latency under that load, p99 (ms)", "accept_p99", "{:.1f}"),
        Row("  pigeond CPU per accept (µs, all its threads)", "pigeond_cpu_us", "{:,.0f}"),
        Row("  PostgreSQL's CPU per accept (µs, its processes)", "pg_cpu_us", "{:,.0f}",
            ratio=False),
        Row(f"accept -> handed_off p50 (ms), {paced}, idle targets", "handoff_p50", "{:.0f}"),
        Row(f"accept -> handed_off p95 (ms), {paced}, idle targets", "handoff_p95", "{:.0f}"),
    ]  # fmt: skip


def table(runs: dict[str, list[Run]], size: Size) -> list[str]:
    lines = markdown_table(("figure", *BACKENDS, "PostgreSQL / SQLite (run by run)"), [])
    for row in rows(size):
        values = {b: [r[row.key] for r in runs[b]] for b in BACKENDS}
        shown = [harness.median_range(values[b], row.fmt) for b in BACKENDS]
        if not row.ratio:
            shown[0] = "-"
        paired = ratio_range(values["SQLite"], values["PostgreSQL"]) if row.ratio else "-"
        lines.append(f"| {row.label} | {shown[0]} | {shown[1]} | {paired} |")
    errors = [
        " / ".join(f"{sum(r[k] for r in runs[b]):.0f}" for k in ("accept_errors",
                                                                    "handoff_errors"))
        for b in BACKENDS
    ]  # fmt: skip
    lines.append(
        f"| non-2xx or lost: accepts / hand-offs (all runs) | {errors[0]} | {errors[1]} | - |"
    )
    return lines


def header(cpus: Cpus, cluster: pg.DurableCluster, load: str, pg_cpus: set[int]) -> list[str]:
    settings = ", ".join(f"{k}={v}" for k, v in cluster.settings().items())
    version = cluster.psql("SHOW server_version").strip()
    return harness.header(
        "Backends: SQLite against PostgreSQL",
        [
            f"{harness.machine_line(cpus)}; PostgreSQL's processes on CPU {sorted(pg_cpus)}",
            f"PostgreSQL {version}, a private cluster over its Unix socket: {settings};"
            " SQLite: WAL, synchronous=FULL",
        ],
        load,
    )


def notes(size: Size) -> list[str]:
    return [
        "",
        f"- {size.runs} runs of each figure, SQLite and PostgreSQL in turns; a fresh pigeond"
        " and database per run; medians (range) of the runs; the ratio is PostgreSQL's"
        " median over SQLite's, with the range of the ratios of runs taken side by side.",
        "- accepts: bench/loadgen.py as in bench/accept_table.py, flood guard off (`"
        + " ".join(harness.GUARD_OFF)
        + "`), nothing delivered; CPU per accept from /proc over"
        " the window (PostgreSQL's: its postmaster and every process it forked).",
        f"- accept -> handed_off: `handed_off_at - created_at` (ms, from the database) of"
        f" every message of a {LATENCY_RATE:g} msg/s stream, round robin over"
        f" {rig.TARGETS} targets, {LATENCY_CONNECTIONS} connections, pigeond's delivery"
        " defaults (`" + " ".join(rig.DELIVERY) + "`) against bench/standin_opencode.py;"
        " the targets were primed with one message each first.",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__)
    where = "PostgreSQL's processes on pigeond's CPU (default) or on the load's"
    parser.add_argument("--pg-cpus", choices=["daemon", "others"], default="daemon", help=where)
    args = parse(parser, argv)
    size = sized(args, Size(), QUICK)
    cpus, load_at_start = take_machine()
    pg_cpus = cpus.daemon if args.pg_cpus == "daemon" else cpus.others
    with pg.durable_cluster(pg_cpus) as cluster:
        runs = measure_all(size, cpus, cluster)
        lines = header(cpus, cluster, load_at_start, pg_cpus)
    print("\n".join([*lines, *table(runs, size), *notes(size)]))


if __name__ == "__main__":
    main()
