"""One accept run under load and the runs of every figure, for bench/accept_table.py.

bench/loadgen.py processes load a server (bench/accept_servers.py) on the generator's
CPUs while /proc gives the server's CPU over the same window; the raw sqlite loop runs in
this process on the server's CPU.  The figures' runs are interleaved.  This module
measures; the tables and their notes are bench/accept_table.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.accept_servers import (
    NAIVE_INSERT,
    Server,
    open_naive_db,
    pigeond_daemon,
    pigeond_server,
    source_env,
    tiny_server,
)
from bench.harness import (
    CLOCK_TICKS,
    ROOT,
    Cpus,
    Sizes,
    bench_command,
    pin_tasks,
    pinning,
    progress,
    scratch_dir,
)
from bench.loadgen import request_bodies
from testkit.daemon_process import stop_process

CONNECTIONS = 64
MAX_REQUESTS = 500_000  # per run: far more than 10 s at any rate seen here
START_DELAY_S = 1.0  # from spawning the generators to their first request


# -- sizes and results ----------------------------------------------------------------


@dataclass(frozen=True)
class Size(Sizes):
    duration_s: float = 10.0
    warmup_s: float = 1.0
    raw_s: float = 3.0


QUICK = Size(duration_s=3.0, warmup_s=0.5, raw_s=1.0)


@dataclass
class Run:
    """One run of one figure: what the generators and /proc saw in the window."""

    rate: float  # 2xx answers per second in the window
    statuses: dict[str, int] = field(default_factory=dict)  # all answers, by status
    lost: int = 0  # requests whose connection closed before the answer, or never answered
    connection_errors: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    generator_cpu: float = 0.0  # CPU seconds / window, over the generator's CPUs
    server_cpu: float = 0.0  # CPU seconds / window, all the server's threads
    server_main_cpu: float = 0.0  # ... its main (reactor) thread alone

    @property
    def non_2xx(self) -> int:
        return sum(n for status, n in self.statuses.items() if not status.startswith("2"))


@dataclass
class Figure:
    label: str
    unit: str
    runs: list[Run] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return [r.rate for r in self.runs]

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


# -- one run under load --------------------------------------------------------------------


def thread_ticks(pid: int) -> dict[int, int]:
    """user + system clock ticks of each thread of ``pid``."""
    ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks[int(tid)] = int(fields[11]) + int(fields[12])
    return ticks


def start_generator(
    server: Server, connections: int, size: Size, cpus: Cpus, start_at: float
) -> subprocess.Popen[str]:
    """One bench/loadgen.py process on the generator's CPUs; its JSON result on stdout."""
    where = ["--unix", server.unix] if server.unix else ["--port", str(server.port)]
    args = [*bench_command("loadgen"), *where,
            "--connections", str(connections), "--duration", str(size.duration_s),
            "--warmup", str(size.warmup_s), "--start-at", repr(start_at),
            "--max-requests", str(MAX_REQUESTS * connections // CONNECTIONS)]  # fmt: skip
    if server.token:
        args.append(f"--token={server.token}")  # "=": a token may start with "-"
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=pinning(cpus.others)
    )


def generator_result(proc: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=timeout_s)
    if proc.returncode != 0 or not out.strip():
        raise RuntimeError(f"the load generator failed (exit code {proc.returncode})")
    result: dict[str, Any] = json.loads(out)
    return result


def sleep_until(when: float) -> None:
    time.sleep(max(when - time.time(), 0))


def measure(
    server: Server,
    generators: int,
    size: Size,
    cpus: Cpus,
    window: tuple[Callable[[], None], Callable[[], None]] | None = None,
) -> Run:
    """Load ``server`` for one run; the server's CPU from /proc over the same window.
    ``window``: what to call when the measuring window opens, and when it closes."""
    start_at = time.time() + START_DELAY_S
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(generators):
            procs.append(start_generator(server, CONNECTIONS // generators, size, cpus, start_at))
        sleep_until(start_at)
        pin_tasks(server.pid, cpus.daemon)  # threads made since the start, if any
        sleep_until(start_at + size.warmup_s)
        before = thread_ticks(server.pid)
        if window is not None:
            window[0]()
        sleep_until(start_at + size.warmup_s + size.duration_s)
        after = thread_ticks(server.pid)
        if window is not None:
            window[1]()
        timeout = size.duration_s + size.warmup_s + 30
        results = [generator_result(p, timeout) for p in procs]
    finally:
        for proc in procs:
            stop_process(proc, 5)
    return combine(results, before, after, server.pid, size.duration_s, len(cpus.others))


def combine(
    results: list[dict[str, Any]],
    before: dict[int, int],
    after: dict[int, int],
    pid: int,
    window_s: float,
    generator_cpus: int,
) -> Run:
    statuses: dict[str, int] = {}
    for result in results:
        for status, n in result["statuses"].items():
            statuses[status] = statuses.get(status, 0) + n
    used = {tid: (t - before.get(tid, 0)) / CLOCK_TICKS for tid, t in after.items()}
    latencies = [r["latency_ms"] for r in results if r["latency_ms"]]
    return Run(
        rate=sum(r["ok_in_window"] for r in results) / window_s,
        statuses=statuses,
        lost=sum(r["lost"] + r["unanswered"] for r in results),
        connection_errors=sum(r["connection_errors"] for r in results),
        p50_ms=statistics.median(x["p50"] for x in latencies) if latencies else 0.0,
        p99_ms=max((x["p99"] for x in latencies), default=0.0),
        generator_cpu=sum(r["cpu_window_s"] for r in results) / window_s / generator_cpus,
        server_cpu=sum(used.values()) / window_s,
        server_main_cpu=used.get(pid, 0.0) / window_s,
    )


# -- raw sqlite ----------------------------------------------------------------------------


@contextlib.contextmanager
def pinned_here(cpus: set[int]) -> Iterator[None]:
    """This thread on ``cpus`` for a while."""
    was = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, was)


def raw_commits(workdir: Path, seconds: float, cpus: Cpus) -> Run:
    """Insert + commit in a loop, WAL and FULL, on the server's CPU: commits per second."""
    rows = [json.loads(b) for b in request_bodies(1024)]
    conn = open_naive_db(str(workdir / "raw.db"))
    try:
        with pinned_here(cpus.daemon):
            n = 0
            started = time.perf_counter()
            while (elapsed := time.perf_counter() - started) < seconds:
                row = rows[n % len(rows)]
                conn.execute(
                    NAIVE_INSERT,
                    (
                        f"msg_raw_{n}",
                        row["from"],
                        row["to"],
                        row["payload"],
                        int(time.time() * 1000),
                    ),
                )
                n += 1
    finally:
        conn.close()
    return Run(rate=n / elapsed)


# -- the figures -------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """How one HTTP figure's server is started and loaded."""

    key: str
    label: str
    server: Callable[[Path, Cpus], contextlib.AbstractContextManager[Server]]
    generators: int = 1


def http_setups(src: Path | None) -> list[Setup]:
    def tiny(kind: str) -> Callable[[Path, Cpus], contextlib.AbstractContextManager[Server]]:
        return lambda workdir, cpus: tiny_server(kind, workdir, cpus)

    def daemon(
        guard: bool, auth: str = "token", over_unix: bool = False
    ) -> Callable[[Path, Cpus], contextlib.AbstractContextManager[Server]]:
        def start(workdir: Path, cpus: Cpus) -> contextlib.AbstractContextManager[Server]:
            unix = workdir / "pigeond.sock" if over_unix else None
            process = pigeond_daemon(
                workdir, guard=guard, env=source_env(src), auth=auth, unix=unix
            )
            return pigeond_server(process, cpus, unix, token=auth == "token")

        return start

    return [
        Setup("bare", "bare twisted.web JSON route, stores nothing", tiny("bare")),
        Setup(
            "bare2",
            "bare route, load from 2 generator processes (32 conn. each)",
            tiny("bare"),
            generators=2,
        ),
        Setup(
            "naive",
            "naive: bare + 1 INSERT + commit per request (WAL, FULL), on the reactor",
            tiny("naive"),
        ),
        Setup(
            "grouped",
            "bare + the requests of one reactor turn in one transaction (FULL), on the reactor",
            tiny("grouped"),
        ),
        Setup("pigeond", "pigeond `POST /swarm/send`, flood guard off", daemon(False)),
        Setup(
            "guarded",
            "pigeond `POST /swarm/send`, flood guard at defaults (not triggered)",
            daemon(True),
        ),
        Setup(
            "noauth",
            "pigeond, flood guard off, `auth = none` (no token check)",
            daemon(False, auth="none"),
        ),
        Setup(
            "unix",
            "pigeond, flood guard off, over its Unix socket (peer credentials checked)",
            daemon(False, over_unix=True),
        ),
    ]


def measure_all(size: Size, cpus: Cpus, src: Path | None) -> dict[str, Figure]:
    """Every figure, its runs interleaved: run 1 of each, then run 2 of each, ..."""
    setups = http_setups(src)
    figures = {s.key: Figure(s.label, "req/s") for s in setups}
    figures["raw"] = Figure(
        "raw sqlite3 insert + commit loop (WAL, FULL), one process", "commits/s"
    )
    for i in range(size.runs):
        for setup in setups:
            with scratch_dir(setup.key) as workdir, setup.server(workdir, cpus) as server:
                run = measure(server, setup.generators, size, cpus)
            figures[setup.key].runs.append(run)
            progress(
                f"run {i + 1}/{size.runs} {setup.key}: {run.rate:,.0f} req/s, "
                f"statuses {run.statuses}"
            )
        with scratch_dir("raw") as workdir:
            figures["raw"].runs.append(raw_commits(workdir, size.raw_s, cpus))
        progress(f"run {i + 1}/{size.runs} raw: {figures['raw'].runs[-1].rate:,.0f} commits/s")
    return figures


def median_run(figure: Figure) -> Run:
    """The run with the median rate (for its CPU figures)."""
    return sorted(figure.runs, key=lambda r: r.rate)[len(figure.runs) // 2]
