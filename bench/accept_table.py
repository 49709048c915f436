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

This module is the command and its tables; the servers are bench/accept_servers.py, the
runs under load bench/accept_load.py, and ``--profile`` bench/accept_profile.py.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.accept_load import (
    CONNECTIONS,
    MAX_REQUESTS,
    QUICK,
    Figure,
    Size,
    measure_all,
    median_run,
)
from bench.accept_profile import profile_pigeond
from bench.accept_servers import CALLER_OUT_OF_REACH, serve
from bench.harness import GUARD_OFF, arguments, header, machine_line, parse, sized, take_machine
from bench.loadgen import DRAIN_S, PAYLOAD_BYTES, SENDERS, TARGETS

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
