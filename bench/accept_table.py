"""Accepts per second: pigeond's ``POST /swarm/send`` against its baselines, in one run.

    .venv/bin/python -m bench.accept_table [--quick] [--profile [--profile-dir DIR]]
        [--runs N] [--pigeond-src DIR]

Measures, each figure the median of ``--runs`` (at least 3) runs with its range:

1. **bare**: a bare twisted.web JSON route (this file, ``--serve bare``) that parses the
   body and answers 202 ``{"accepted": true}``, storing nothing;
2. **naive**: the same route plus one ``INSERT`` and its commit per request on the
   reactor thread, in a SQLite file in WAL mode with ``synchronous=FULL``;
3. **grouped**: the bare route plus the cheapest group commit: the requests of one
   reactor turn inserted in one transaction and committed on the reactor thread, then
   answered; no validation, auth, log or thread: the ceiling of any design that stores;
4. **raw sqlite**: a plain loop of insert + commit (WAL, FULL) in this process: the
   commits per second this disk allows;
5. **pigeond**: a real pigeond (testkit/daemon_process.py, ``opencode_url=""`` so nothing is
   delivered, the token sent as a client would) taking ``POST /swarm/send``, once with
   the flood guard off (``--sender-rate-per-s 0 --sender-burst 0
   --max-queued-per-target 0``) and once at its defaults, not triggered; then with
   ``auth = none`` (what the token check costs) and over its Unix socket (what the
   peer-credential check costs, against ``auth = none`` on TCP).

The load comes from bench/loadgen.py: 64 keep-alive connections on 127.0.0.1, no
pipelining, bodies with a 500-byte payload from 2,048 senders to 1,024 targets,
1 s of warm-up then a 10 s window (3 s and 0.5 s with ``--quick``), at most
:data:`MAX_REQUESTS` requests.  With 2 cores or more, the server runs pinned to the
first CPU and the generator (and this script) to the others.  Every run starts a fresh
server with a fresh database in a fresh temporary directory; the runs of the figures
are interleaved so that a slow minute of the machine spreads over all of them.
Whether the generator is the bottleneck is shown twice: its own CPU use in the
window, and the bare route loaded by 2 generator processes (32 connections each)
against 1.

``--profile`` then runs pigeond (flood guard at its defaults) under cProfile under the
same load, every thread profiled: the reactor thread as ``python -m cProfile -m
pigeond`` would but only inside the measuring window (SIGUSR1/SIGUSR2), the writer and
reader threads each over its life.  It prints what the reactor thread spends per
accept, the writer's group commits, and the top lines by cumulative and by own time;
``--profile-dir`` keeps the .prof files.

``--pigeond-src DIR`` runs pigeond from another source tree through ``PYTHONPATH``, e.g.
an older commit exported with ``git archive COMMIT pigeond | tar -x -C DIR``, for a
before/after table against the same baselines.

Prints markdown: the machine, one table of figures, one of ratios, the notes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import pstats
import select
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from twisted.web import resource, server

from bench.harness import (
    CLOCK_TICKS,
    GUARD_OFF,
    ROOT,
    Cpus,
    Sizes,
    arguments,
    bench_command,
    header,
    machine_line,
    parse,
    pin_tasks,
    pinning,
    progress,
    running,
    scratch_dir,
    sized,
    take_machine,
)
from bench.loadgen import DRAIN_S, PAYLOAD_BYTES, SENDERS, TARGETS, request_bodies
from testkit.daemon_process import DaemonProcess, stop_process

CONNECTIONS = 64
MAX_REQUESTS = 500_000  # per run: far more than 10 s at any rate seen here
START_DELAY_S = 1.0  # from spawning the generators to their first request
SERVER_START_TIMEOUT_S = 15.0
# The guard at its defaults but the caller's bucket: the load comes over TCP, where every
# client is one caller, so its defaults (40 a second) would refuse it; raised out of reach,
# the bucket is still charged for every send, which is what the figure is for.
CALLER_OUT_OF_REACH = ("--caller-rate-per-s", "1000000", "--caller-burst", "10000000")
PROFILE_TOP = 15

NAIVE_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY,
    msg_id TEXT NOT NULL UNIQUE,
    from_session TEXT NOT NULL,
    to_session TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at INTEGER NOT NULL
)"""
NAIVE_INSERT = (
    "INSERT INTO messages (msg_id, from_session, to_session, payload, created_at)"
    " VALUES (?, ?, ?, ?, ?)"
)


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


# -- the bare and naive servers (run as ``--serve bare|naive``) -----------------------


class JsonRoute(resource.Resource):
    """Parses the JSON body and answers 202 ``{"accepted": true}``; with a connection, also
    inserts a row and commits it (autocommit) before answering, on the reactor thread."""

    isLeaf = True

    def __init__(self, conn: sqlite3.Connection | None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.conn = conn
        self.count = 0

    def render_POST(self, request: server.Request) -> bytes:
        assert request.content is not None
        body = json.loads(request.content.read())
        if not isinstance(body, dict):
            request.setResponseCode(400)
            return b'{"error": "body must be a JSON object"}'
        if self.conn is not None:
            self.count += 1
            row = (f"msg_naive_{self.count}", body["from"], body["to"], body["payload"])
            self.conn.execute(NAIVE_INSERT, (*row, int(time.time() * 1000)))
        request.setResponseCode(202)
        request.setHeader(b"content-type", b"application/json")
        return b'{"accepted": true}'


class GroupedRoute(resource.Resource):
    """The bare route plus group commit in its cheapest form: the requests parsed in one
    reactor turn are inserted in one transaction, committed (FULL) on the reactor thread at
    the end of the turn, then answered.  Nothing else: no validation, auth, log or thread.
    What any design that stores each send before its 202 can at best reach here."""

    isLeaf = True

    def __init__(self, conn: sqlite3.Connection, reactor: Any) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.conn = conn
        self.reactor = reactor
        self.count = 0
        self.waiting: list[tuple[server.Request, tuple[str, str, str, str, int]]] = []

    def render_POST(self, request: server.Request) -> int | bytes:
        assert request.content is not None
        body = json.loads(request.content.read())
        if not isinstance(body, dict):
            request.setResponseCode(400)
            return b'{"error": "body must be a JSON object"}'
        self.count += 1
        row = (f"msg_grouped_{self.count}", body["from"], body["to"], body["payload"])
        if not self.waiting:
            self.reactor.callLater(0, self.commit)
        self.waiting.append((request, (*row, int(time.time() * 1000))))
        return server.NOT_DONE_YET

    def commit(self) -> None:
        group, self.waiting = self.waiting, []
        with self.conn:  # one transaction, one fsync
            self.conn.executemany(NAIVE_INSERT, [row for _, row in group])
        for request, _ in group:
            request.setResponseCode(202)
            request.setHeader(b"content-type", b"application/json")
            request.setHeader(b"content-length", b"18")
            request.write(b'{"accepted": true}')
            request.finish()


class QuietSite(server.Site):
    def log(self, request: Any) -> None:
        """No access log, as pigeond's own site."""


def serve(kind: str, db: str) -> None:
    """The bare (or naive) route on 127.0.0.1, an ephemeral port, until SIGTERM."""
    from twisted.internet import reactor as installed

    reactor: Any = installed
    route: resource.Resource
    if kind == "grouped":
        conn = open_naive_db(db)
        conn.isolation_level = "IMMEDIATE"  # transactions, not autocommit
        route = GroupedRoute(conn, reactor)
    else:
        route = JsonRoute(open_naive_db(db) if kind == "naive" else None)
    site = QuietSite(route)  # type: ignore[no-untyped-call]
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    print(f"listening on {port.getHost().port}", flush=True)
    reactor.run()


def open_naive_db(path: str) -> sqlite3.Connection:
    """A connection in autocommit mode: each INSERT is its own transaction and commit."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(NAIVE_SCHEMA)
    return conn


# -- processes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    port: int
    pid: int
    token: str | None = None
    unix: str | None = None  # load it over this Unix socket instead of the port


def thread_ticks(pid: int) -> dict[int, int]:
    """user + system clock ticks of each thread of ``pid``."""
    ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks[int(tid)] = int(fields[11]) + int(fields[12])
    return ticks


def read_port(stdout: IO[str], timeout_s: float) -> int:
    ready, _, _ = select.select([stdout], [], [], timeout_s)
    line = stdout.readline() if ready else ""
    if not line.startswith("listening on "):
        raise RuntimeError(f"the server did not start: {line!r}")
    return int(line.split()[-1])


@contextlib.contextmanager
def tiny_server(kind: str, workdir: Path, cpus: Cpus) -> Iterator[Server]:
    """The bare or naive route in a subprocess pinned to the server's CPU."""
    args = bench_command("accept_table", "--serve", kind, "--db", str(workdir / "naive.db"))
    with (workdir / "server.log").open("w") as log:
        proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=ROOT,
            preexec_fn=pinning(cpus.daemon),
        )
        try:
            assert proc.stdout is not None
            yield Server(read_port(proc.stdout, SERVER_START_TIMEOUT_S), proc.pid)
        finally:
            stop_process(proc)
            if proc.stdout is not None:
                proc.stdout.close()


def source_env(src: Path | None) -> dict[str, str]:
    """The environment that makes ``python -m pigeond`` import pigeond from ``src``."""
    return {} if src is None else {"PYTHONPATH": str(src)}


def pigeond_daemon(
    workdir: Path,
    *,
    guard: bool,
    env: dict[str, str] | None = None,
    auth: str = "token",
    unix: Path | None = None,
) -> DaemonProcess:
    """A pigeond for one run: flood guard on or off, ``auth`` as given, listening on
    127.0.0.1 or, with ``unix``, on that Unix socket only (peer credentials checked)."""
    extra = [*(CALLER_OUT_OF_REACH if guard else GUARD_OFF), "--auth", auth]
    listen = "tcp:0:interface=127.0.0.1" if unix is None else f"unix:{unix}"
    return DaemonProcess(
        workdir, workdir / "pigeond.db", opencode_url="", tick_ms=500, extra_args=extra,
        env=env, listen=listen,
    )  # fmt: skip


@contextlib.contextmanager
def pigeond_server(
    daemon: DaemonProcess, cpus: Cpus, unix: Path | None = None, *, token: bool = True
) -> Iterator[Server]:
    """``daemon`` started and pinned; loaded over ``unix`` if given (the socket stands in
    for the token), else over TCP with its token (none with ``auth = none``)."""
    with running(daemon, SERVER_START_TIMEOUT_S):
        pin_tasks(daemon.pid, cpus.daemon)
        if unix is not None:
            yield Server(0, daemon.pid, None, str(unix))
        else:
            yield Server(daemon.port, daemon.pid, daemon.token if token else None)


# -- one run under load --------------------------------------------------------------------


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


# -- the tables ----------------------------------------------------------------------------


def spread(values: Sequence[float]) -> str:
    return f"{min(values):,.0f}-{max(values):,.0f}"


def pct(values: Sequence[float]) -> str:
    return f"{100 * statistics.median(values):.0f} %"


def figure_row(figure: Figure) -> str:
    runs = figure.runs
    if figure.unit != "req/s":
        return (
            f"| {figure.label} | {figure.median:,.0f} {figure.unit} | {spread(figure.rates)}"
            f" | {len(runs)} | - | - | - | - | - |"
        )
    bad = sum(r.non_2xx for r in runs)
    lost = sum(r.lost + r.connection_errors for r in runs)
    latency = (
        f"{statistics.median(r.p50_ms for r in runs):.1f} /"
        f" {statistics.median(r.p99_ms for r in runs):.1f}"
    )
    main_thread = pct([r.server_main_cpu for r in runs])
    server = f"{pct([r.server_cpu for r in runs])} (main thread {main_thread})"
    per_request = statistics.median(1e6 * r.server_cpu / r.rate for r in runs if r.rate > 0)
    ok = sum(sum(n for s, n in r.statuses.items() if s.startswith("2")) for r in runs)
    return (
        f"| {figure.label} | {figure.median:,.0f} {figure.unit} | {spread(figure.rates)}"
        f" | {len(runs)} | {ok:,} / {bad} / {lost} | {latency} | {server}"
        f" | {per_request:,.0f} | {pct([r.generator_cpu for r in runs])} |"
    )


def figure_table(figures: dict[str, Figure]) -> list[str]:
    order = ["bare", "bare2", "naive", "raw", "pigeond", "guarded"]
    return [
        "| figure | median | range (min-max) | runs | 2xx / non-2xx / lost | latency p50 / p99"
        " (ms) | server CPU | server CPU µs per 2xx | generator CPU |",
        "|---|---|---|---|---|---|---|---|---|",
        *(figure_row(figures[key]) for key in order),
    ]


@dataclass(frozen=True)
class Ratio:
    label: str
    top: str
    bottom: str
    target: float | None
    note: str = ""


RATIOS = [
    Ratio("pigeond (guard off) / bare", "pigeond", "bare", 0.75),
    Ratio("pigeond (guard off) / naive", "pigeond", "naive", 3.0),
    Ratio("pigeond (guard defaults) / bare", "guarded", "bare", 0.75),
    Ratio("pigeond (guard defaults) / naive", "guarded", "naive", 3.0),
    Ratio("flood guard cost: guard defaults / guard off", "guarded", "pigeond", 0.95),
    Ratio("token check cost: token / `auth = none` (guard off)", "pigeond", "noauth", 0.95),
    Ratio(
        "peer-credential check: Unix socket / TCP with `auth = none`",
        "unix",
        "noauth",
        0.95,
        "the transports differ too",
    ),
    Ratio("naive / bare", "naive", "bare", None, "what one FULL commit per request costs"),
    Ratio(
        "grouped / bare",
        "grouped",
        "bare",
        None,
        "the most any design that stores each send can reach here",
    ),
    Ratio(
        "pigeond (guard off) / raw commits/s",
        "pigeond",
        "raw",
        None,
        "accepts per commit the disk allows",
    ),
    Ratio(
        "bare, 2 generators / 1 generator",
        "bare2",
        "bare",
        None,
        "~ 1x: the generator is not the bottleneck",
    ),
]


def ratio_row(ratio: Ratio, figures: dict[str, Figure]) -> str:
    top, bottom = figures[ratio.top], figures[ratio.bottom]
    value = top.median / bottom.median
    paired = [t / b for t, b in zip(top.rates, bottom.rates, strict=True)]
    target = "-" if ratio.target is None else f">= {ratio.target:g}x"
    met = "-" if ratio.target is None else ("yes" if value >= ratio.target else "**no**")
    return (
        f"| {ratio.label} | {value:.2f}x | {min(paired):.2f}-{max(paired):.2f}x | {target}"
        f" | {met} | {ratio.note} |"
    )


def ratio_table(figures: dict[str, Figure]) -> list[str]:
    return [
        "| ratio (of medians) | value | range (run by run) | target | met | note |",
        "|---|---|---|---|---|---|",
        *(ratio_row(r, figures) for r in RATIOS),
    ]


def error_notes(figures: dict[str, Figure]) -> list[str]:
    """One line per figure that saw a non-2xx answer or a lost request: what it saw."""
    lines = []
    for figure in figures.values():
        bad = [
            (r.statuses, r.lost, r.connection_errors)
            for r in figure.runs
            if r.non_2xx or r.lost or r.connection_errors
        ]
        if bad:
            lines.append(f"- errors in {figure.label}: (statuses, lost, refused) by run: {bad}")
    return lines or ["- no run saw a non-2xx answer, a lost request or a refused connection."]


def notes(size: Size) -> list[str]:
    return [
        "Notes:",
        f"- Load: bench/loadgen.py, {CONNECTIONS} keep-alive HTTP/1.1 connections on 127.0.0.1"
        " (asyncio, raw sockets, no pipelining), each POST a JSON body with a"
        f" {PAYLOAD_BYTES}-byte payload, cycling over {SENDERS:,} senders and {TARGETS:,}"
        f" targets; {size.warmup_s:g} s warm-up, then a {size.duration_s:g} s window, at most"
        f" {MAX_REQUESTS:,} requests a run. The same bodies go to every server.",
        "- A figure is 2xx answers in the window per second; every answer counts by status"
        " (non-2xx is an error), lost = requests whose connection closed unanswered or"
        f" still unanswered {DRAIN_S:g} s after the window, plus connections refused."
        " Latency: median over runs of p50 and of p99.",
        "- Generator not the bottleneck: generator CPU = its user + system CPU seconds in"
        " the window (getrusage) over the window and its CPUs; the bare route is also"
        " loaded by 2 generator processes against 1 (ratio row).",
        "- Server CPU from /proc/PID/task/*/stat over the same window: 100 % = one core;"
        " main thread = the reactor; the rest is pigeond's writer and reader threads."
        " Below 100 %, the server waits (for fsync) rather than computes.",
        "- pigeond: a fresh daemon and database per run (testkit/daemon_process.py,"
        " `--opencode-url ''`: no delivery, messages stay queued), defaults otherwise"
        " (token auth: the generator sends the token; info log, one line per accept to a"
        " pipe); guard off = `" + " ".join(GUARD_OFF) + "`; guard defaults = 10 msg/s"
        " per sender after a burst of 100, 1,000 queued per target, 256 MiB queued, the"
        " caller's bucket (every TCP client is one caller) raised out of reach (`"
        + " ".join(CALLER_OUT_OF_REACH)
        + "`), which this load never reaches (a 429 or"
        " 507 would show below as an error).",
        f"- raw sqlite: insert + commit for {size.raw_s:g} s a run on the server's CPU, same"
        " table and rows as naive; databases in a fresh directory under "
        f"{tempfile.gettempdir()} on this machine's disk.",
    ]


# -- the profile --------------------------------------------------------------------------

# Runs pigeond as `python -m cProfile -o main.prof -m pigeond ...` would, but profiles the
# reactor (main) thread only inside the measuring window (SIGUSR1 starts, SIGUSR2 stops and
# writes it), and each other thread too over its whole life (cProfile alone sees only the
# thread that started it): a thread's profile is written when it ends, which pigeond's pool
# threads do at a clean stop.
PROFILE_LAUNCHER = """
import cProfile, os, runpy, signal, sys, threading
out = os.environ["BENCH_PROFILE_DIR"]
main_profile = cProfile.Profile()
def _start(signum, frame):
    main_profile.enable()
def _stop(signum, frame):
    main_profile.disable()
    main_profile.dump_stats(os.path.join(out, "main.prof"))
signal.signal(signal.SIGUSR1, _start)
signal.signal(signal.SIGUSR2, _stop)
_run = threading.Thread.run
def _profiled_run(self):
    profile = cProfile.Profile()
    profile.enable()
    try:
        _run(self)
    finally:
        profile.disable()
        profile.dump_stats(os.path.join(out, f"thread-{self.name}.prof"))
threading.Thread.run = _profiled_run
sys.argv[0] = "pigeond"
runpy.run_module("pigeond", run_name="__main__", alter_sys=True)
"""


def profile_pigeond(
    size: Size, cpus: Cpus, keep: Path | None, src: Path | None, unprofiled: Run | None = None
) -> list[str]:
    """One run of pigeond (flood guard at defaults) under the profiler; its report."""
    with scratch_dir("profile") as workdir:
        out = workdir / "profiles"
        out.mkdir()
        env = {"BENCH_PROFILE_DIR": str(out), **source_env(src)}
        daemon = pigeond_daemon(workdir, guard=True, env=env)
        daemon.args[1:3] = ["-c", PROFILE_LAUNCHER]  # instead of "-m pigeond"
        with pigeond_server(daemon, cpus) as server:
            signals = (
                lambda: os.kill(server.pid, signal.SIGUSR1),
                lambda: os.kill(server.pid, signal.SIGUSR2),
            )
            run = measure(server, 1, size, cpus, signals)
        if keep is not None:
            shutil.copytree(out, keep, dirs_exist_ok=True)
        return profile_report(out, run, size, unprofiled)


def profile_report(out: Path, run: Run, size: Size, unprofiled: Run | None) -> list[str]:
    accepted = int(run.rate * size.duration_s)
    lines = [
        "### Profile: pigeond under load, flood guard at defaults, cProfile on every thread",
        "",
        f"{run.rate:,.0f} accepts/s under the profiler ({accepted:,} in the {size.duration_s:g} s"
        f" window; statuses over the run {run.statuses}); server CPU {100 * run.server_cpu:.0f} %"
        f" (main thread {100 * run.server_main_cpu:.0f} %).",
    ]
    if unprofiled is not None and unprofiled.rate > 0:
        main_us = 1e6 * unprofiled.server_main_cpu / unprofiled.rate
        other_us = 1e6 * (unprofiled.server_cpu - unprofiled.server_main_cpu) / unprofiled.rate
        lines.append(
            f"Without the profiler (the median guard-defaults run above): reactor thread"
            f" {main_us:.0f} µs of CPU per accept, other threads {other_us:.0f} µs."
        )
    lines.append("")
    main = out / "main.prof"
    if main.exists():
        stats = pstats.Stats(str(main), stream=io.StringIO())
        lines += breakdown_table(stats, accepted, size.duration_s)
        lines += top_lines("reactor (main) thread, in the window", [main], "cumulative")
        lines += top_lines("reactor (main) thread, in the window", [main], "tottime")
    writers = sorted(out.glob("thread-*writer*.prof"))
    if writers:
        lines += writer_lines(writers, sum(n for s, n in run.statuses.items() if s[0] == "2"))
        lines += top_lines("writer thread, its whole life", writers, "tottime")
    readers = sorted(out.glob("thread-*reader*.prof"))
    if readers:
        lines += top_lines(
            f"{len(readers)} reader threads together, whole life", readers, "tottime"
        )
    return lines


# What the reactor thread does for one accept: (label, file fragment, function, own time?).
# Rows nest (cumulative times): the log line is inside the settling of a commit, and so on.
BREAKDOWN = [
    ("socket reads (recv; includes waiting for the GIL back)", "~",
     "<method 'recv' of '_socket.socket' objects>", True),
    ("HTTP request line + headers (twisted.web, http_limits)", "twisted/web/http.py",
     "lineReceived", False),
    ("access checks: token, Host, Origin (api/access.py)", "pigeond/api/access.py",
     "__call__", False),
    ("body: JSON parse + validation (parse_send_body)", "pigeond/api/send_request.py",
     "parse_send_body", False),
    ("  of which json.loads", "json/__init__.py", "loads", False),
    ("msg_id minting (make_msg_id)", "pigeond/ids.py", "make_msg_id", False),
    ("flood guard (admit: the sender's bucket; the target is counted in the commit)",
     "pigeond/api/flood.py", "admit", False),
    ("hand-offs to the db threads (deferToThreadPool)", "twisted/internet/threads.py",
     "deferToThreadPool", False),
    ("group commit: settling a group (resumes the handlers)", "pigeond/storage/group_commit.py",
     "_settle", False),
    ("the per-accept log line (twisted.logger emit, format, stdout)",
     "twisted/logger/_logger.py", "emit", False),
    ("the answer: headers, body, send (JsonApi write)", "pigeond/api/web.py", "write", False),
    ("pipe writes (the waker; include waiting for the GIL)", "~",
     "<built-in method posix.write>", True),
    ("Deferred machinery (_runCallbacks, own time only)", "twisted/internet/defer.py",
     "_runCallbacks", True),
    ("routes.send itself (every resume, cumulative)", "pigeond/api/routes.py", "send", False),
]  # fmt: skip


def stat_entry(stats: pstats.Stats, fragment: str, name: str) -> tuple[int, float, float] | None:
    """(calls, own time, cumulative time) of the functions ``name`` in files with
    ``fragment`` in their path, summed; None if there is none."""
    table: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
    table = stats.stats  # type: ignore[attr-defined]
    found = [v for (path, _, func), v in table.items() if func == name and fragment in path]
    if not found:
        return None
    return sum(v[1] for v in found), sum(v[2] for v in found), sum(v[3] for v in found)


def breakdown_table(stats: pstats.Stats, accepted: int, window_s: float) -> list[str]:
    total = float(stats.total_tt)  # type: ignore[attr-defined]
    poll = stat_entry(stats, "~", "<method 'poll' of 'select.epoll' objects>")
    busy = total - (poll[1] if poll else 0.0)
    per = 1e6 / max(accepted, 1)
    lines = [
        f"#### Reactor thread per accept, under cProfile ({accepted:,} accepts; the profiler"
        " inflates small calls; rows nest)",
        "",
        "| what | calls per accept | µs per accept | share of the window |",
        "|---|---|---|---|",
        f"| reactor thread busy (window minus epoll wait) | - | {busy * per:,.0f}"
        f" | {100 * busy / window_s:.0f} % |",
    ]
    for label, fragment, name, own in BREAKDOWN:
        entry = stat_entry(stats, fragment, name)
        if entry is None:
            lines.append(f"| {label} | n/a | n/a | n/a |")
            continue
        seconds = entry[1] if own else entry[2]
        lines.append(
            f"| {label} | {entry[0] / max(accepted, 1):.1f} | {seconds * per:,.0f}"
            f" | {100 * seconds / window_s:.0f} % |"
        )
    return [*lines, ""]


def writer_lines(files: list[Path], accepted: int) -> list[str]:
    stats = pstats.Stats(*(str(f) for f in files), stream=io.StringIO())
    total = float(stats.total_tt)  # type: ignore[attr-defined]
    idle = stat_entry(stats, "~", "<method 'acquire' of '_thread.lock' objects>")
    groups = stat_entry(stats, "pigeond/storage/repository.py", "accept_many")
    lines = [
        f"Writer thread, its whole life ({total:.2f} s): waiting for work"
        f" {idle[1] if idle else 0.0:.2f} s, busy {total - (idle[1] if idle else 0.0):.2f} s."
    ]
    if groups is not None and groups[0] > 0:
        lines[0] += (
            f" {groups[0]:,} group commits (accept_many) for {accepted:,} accepts: about"
            f" {accepted / groups[0]:.1f} per commit, {1000 * groups[2] / groups[0]:.2f} ms"
            " per commit (wall time, fsync included)."
        )
    return [*lines, ""]


def top_lines(title: str, files: list[Path], key: str) -> list[str]:
    stream = io.StringIO()
    stats = pstats.Stats(str(files[0]), stream=stream)
    for extra in files[1:]:
        stats.add(str(extra))
    stats.sort_stats(key).print_stats(PROFILE_TOP)
    text = stream.getvalue().replace(str(ROOT) + "/", "")
    text = text.replace(sys.prefix + "/", "").replace(sys.base_prefix + "/", "")
    body = [line for line in text.splitlines() if line.strip() and ".prof" not in line]
    return [f"#### {title}, top {PROFILE_TOP} by {key}", "", "```", *body, "```", ""]


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(__doc__)
    parser.add_argument("--profile", action="store_true", help="also profile pigeond")
    parser.add_argument(
        "--pigeond-src", type=Path, help="run pigeond from this source tree (e.g. a git archive)"
    )
    parser.add_argument("--profile-dir", type=Path, help="with --profile: keep the .prof files")
    parser.add_argument("--serve", choices=["bare", "naive", "grouped"], help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    return parse(parser, argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.serve:
        serve(args.serve, args.db)
        return
    size = sized(args, Size(), QUICK)
    cpus, load_at_start = take_machine()
    src = args.pigeond_src.resolve() if args.pigeond_src else None
    figures = measure_all(size, cpus, src)
    title = "Accepts: pigeond against its baselines"
    lines = header(title, [machine_line(cpus, "the server")], load_at_start, src)
    lines += [*figure_table(figures), "", *ratio_table(figures), ""]
    lines += [*notes(size), *error_notes(figures), ""]
    if args.profile:
        guarded = median_run(figures["guarded"])
        lines += profile_pigeond(size, cpus, args.profile_dir, src, guarded)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
