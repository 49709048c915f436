"""History does not slow anything: pigeond's reads over a million delivered rows.

    .venv/bin/python -m bench.history_table [--rows 1000000] [--runs 5] [--quick]

Builds, in a temporary directory removed at the end, two pigeond databases as pigeond
opens them (WAL, ``synchronous=FULL``, every migration) and leaves them (no ANALYZE
statistics: the daemon never runs it):

* **history**: ``--rows`` handed-off messages over 20 targets
  (:func:`~pigeond.storage.synthetic.add_delivered_history`), 10,000 stuck rows on top
  (5,000 queued in backoff and 5,000 failed, over 100 targets:
  :func:`~pigeond.storage.synthetic.add_stuck_rows`) and 30 queued messages due now for
  10 other targets, accepted through the repository;
* **baseline**: the same with 10,000 handed-off messages, built in the same run.

Then times on each, as the median of ``--runs`` runs (each run the median of many calls,
the two databases taking turns in short slices so that a noisy moment falls on both),
with the range over the runs:

1. the arbiter tick's database time: :meth:`SwarmRepository.ready_targets`, the one
   storage call a tick makes (arbiter.py ``_dispatch_ready``; ``_record_unrecorded``
   writes only after a hand-off could not be recorded);
2. an inbox page of 100 from the middle of one target's hand-offs:
   :meth:`SwarmRepository.inbox_page`, the call ``GET /swarm/inbox`` makes, with the
   daemon's default ``inbox_max_bytes``;
3. ``GET /swarm/message/<id>`` of the message at that middle: :meth:`SwarmRepository.get`
   (the route's storage call), and the whole HTTP round trip to a real pigeond started on
   that database (testkit/daemon_process.py, ``opencode_url=""`` so nothing is delivered,
   default tick) over one keep-alive 127.0.0.1 connection sending the bearer token;
4. pigeon-tui's first screen (bench/tui_first_screen.py: headless, from the app's start
   to its first snapshot on screen), whose reads meet the 10,000 stuck rows.

For scale, without a target: the expiry sweep (a job of its own, run at the tick's
interval), the TUI's snapshot read alone; over HTTP, a malformed ``GET
/swarm/message/<id>`` refused before any storage call, ``GET /swarm/inbox`` (the same
page), ``GET /health`` (which counts messages by state), and a bare twisted.web GET route
(bench/history_http.py): what an HTTP round trip alone costs on the machine.

The ratio history/baseline is taken within each run: near 1, the history costs nothing.
``--quick`` builds 100,000 rows and runs 3 times, for a fast check.  Prints one markdown
table and the machine; progress goes to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.harness import (
    Comparison,
    arguments,
    duration,
    load_average,
    machine_line,
    parse,
    per_run_medians,
    progress,
    scratch_dir,
    spread,
)
from bench.history_http import Client, bare_route, pigeond_on
from bench.tui_first_screen import first_screen
from pigeond.model import NewMessage
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.repository import DEFAULT_INBOX_MAX_BYTES
from pigeond.storage.synthetic import (
    add_delivered_history,
    add_stuck_rows,
    drop_statistics,
)
from pigeond_tui.data import read_snapshot

BASELINE_ROWS = 10_000
QUICK_ROWS = 100_000
STUCK_ROWS = 10_000
# Few enough targets that even the baseline's has 500 hand-offs: a full page after its middle.
HISTORY_TARGETS = 20
STUCK_TARGETS = 100
DUE_TARGETS, DUE_PER_TARGET = 10, 3
PAGE = 100
INBOX_TARGET = "ses_t7"  # one of add_delivered_history's targets
MALFORMED = "/swarm/message/msg_!"  # fails the route's msg_id pattern
STORAGE_BUDGET_S = 0.4  # per database, figure and run
HTTP_BUDGET_S = 0.6
ROUNDS = 10
SLOW_ROUNDS = 2  # for calls of tens of ms: a slice holds at least 3 calls anyway

Call = Callable[[], object]


@dataclass(frozen=True)
class Db:
    """One built database and the middle of its inbox target's hand-offs."""

    label: str
    path: Path
    repo: SwarmRepository
    middle_seq: int  # a cursor halfway through INBOX_TARGET's hand-offs
    middle_id: str  # the first message after it


# -- the databases ------------------------------------------------------------------------


def accept_due(repo: SwarmRepository, now_ms: int) -> None:
    """Queued messages due now for a few targets, so the tick finds work to hand out."""
    for t in range(DUE_TARGETS):
        for k in range(DUE_PER_TARGET):
            message = NewMessage(
                msg_id=f"msg_due{t}_{k}", from_session="ses_bench_sender",
                to_session=f"ses_due{t}", channel=None, kind="chat", priority="normal",
                reply_to=None, payload="due",
            )  # fmt: skip
            repo.accept(message, now_ms - 1_000)


def build(label: str, path: Path, rows: int, now_ms: int) -> Db:
    """A database as the daemon leaves it: ``rows`` hand-offs, the stuck rows, due messages."""
    began = time.perf_counter()
    repo = SwarmRepository(open_database(path))
    add_delivered_history(repo.sqlite_connection, rows, HISTORY_TARGETS, now_ms - 3_600_000)
    queued = STUCK_ROWS // 2
    add_stuck_rows(repo.sqlite_connection, queued, STUCK_ROWS - queued, STUCK_TARGETS, now_ms)
    accept_due(repo, now_ms)
    drop_statistics(repo.sqlite_connection)
    middle = repo.last_handoff_seq() // 2
    page = repo.inbox_page(INBOX_TARGET, middle, PAGE)
    if len(page.messages) != PAGE or not page.has_more:
        raise SystemExit(f"{label}: no full inbox page after the middle ({len(page.messages)})")
    progress(f"built {label}: {rows:,} rows in {time.perf_counter() - began:.1f} s")
    return Db(label, path, repo, middle, page.messages[0].msg_id)


# -- timing -------------------------------------------------------------------------------


def compare(
    name: str, target_s: float | None, calls: tuple[Call, Call], runs: int, budget_s: float,
    rounds: int = ROUNDS,
) -> Comparison:  # fmt: skip
    """One figure: ``calls`` is (on the history, on the baseline)."""
    progress(f"timing {name} ...")
    history, baseline = per_run_medians(calls, runs, budget_s, rounds)
    return Comparison(name, target_s, history, baseline)


def storage_figures(big: Db, small: Db, runs: int, now_ms: int) -> list[Comparison]:
    """The storage calls of the tick, the inbox and the message route, and the TUI's read."""

    def tick(db: Db) -> Call:
        return lambda: db.repo.ready_targets(now_ms)

    def inbox(db: Db) -> Call:
        return lambda: db.repo.inbox_page(
            INBOX_TARGET, db.middle_seq, PAGE, DEFAULT_INBOX_MAX_BYTES
        )

    def message(db: Db) -> Call:
        return lambda: db.repo.get(db.middle_id)

    def sweep(db: Db) -> Call:
        return lambda: db.repo.expire_due(now_ms)  # nothing is due: a read only

    def snapshot(db: Db) -> Call:
        return lambda: read_snapshot(db.path, "queued", "", 0, now_ms)

    budget = STORAGE_BUDGET_S
    return [
        compare("arbiter tick, database time (ready_targets)", 200e-6,
                (tick(big), tick(small)), runs, budget),
        compare(f"inbox page of {PAGE} from the middle (inbox_page)", 1e-3,
                (inbox(big), inbox(small)), runs, budget),
        compare("GET /swarm/message/<id>, storage call (get)", 0.5e-3,
                (message(big), message(small)), runs, budget),
        compare("(for scale) expiry sweep, also every tick interval (expire_due)", None,
                (sweep(big), sweep(small)), runs, budget),
        compare("(for scale) TUI snapshot read alone (read_snapshot)", None,
                (snapshot(big), snapshot(small)), runs, budget, SLOW_ROUNDS),
    ]  # fmt: skip


# -- over HTTP ----------------------------------------------------------------------------


@contextlib.contextmanager
def serving(db: Db, workdir: Path) -> Iterator[Client]:
    """pigeond on ``db``, said on stderr: starting one on a million rows takes a moment."""
    progress(f"starting pigeond on {db.label} ...")
    with pigeond_on(db.path, workdir) as client:
        yield client


def http_figures(
    big: Db, small: Db, runs: int, workdir: Path
) -> tuple[list[Comparison], list[float]]:
    """The message route for its target; a refused request, the inbox page and /health for
    scale; and the bare twisted.web route's round trip (per-run medians), timed in the same
    slices as the message route: the HTTP floor of the machine."""
    with (
        serving(big, workdir / "big") as on_big,
        serving(small, workdir / "small") as on_small,
        bare_route() as bare,
    ):

        def both(path: Callable[[Db], str]) -> tuple[Call, Call]:
            return on_big.get(path(big)), on_small.get(path(small))

        for client, db in ((on_big, big), (on_small, small)):
            if db.middle_id.encode() not in client.get(f"/swarm/message/{db.middle_id}")():
                raise SystemExit(f"{db.label}: GET /swarm/message answered another message")
        name = "GET /swarm/message/<id>, HTTP round trip"
        progress(f"timing {name}, and the bare route ...")
        message = both(lambda db: f"/swarm/message/{db.middle_id}")
        history, baseline, floor = per_run_medians((*message, bare.get("/")), runs, HTTP_BUDGET_S)
        # refused (400) before any storage call: what the token check, routing and an
        # answer cost, so the message figure splits into HTTP and the storage hop
        refused = (on_big.get(MALFORMED, 400), on_small.get(MALFORMED, 400))
        figures = [
            Comparison(name, 0.5e-3, history, baseline),
            compare("(for scale) GET /swarm/message/<malformed>: 400, no storage call", None,
                    refused, runs, HTTP_BUDGET_S),
            compare(f"(for scale) GET /swarm/inbox, page of {PAGE}, HTTP", None,
                    both(inbox_path), runs, HTTP_BUDGET_S),
            compare("(for scale) GET /health, HTTP", None, both(lambda db: "/health"), runs,
                    HTTP_BUDGET_S, SLOW_ROUNDS),
        ]  # fmt: skip
        return figures, floor


def inbox_path(db: Db) -> str:
    """The page the inbox figure reads, asked for as a client pages: with a ``cur_N`` cursor."""
    return f"/swarm/inbox?session={INBOX_TARGET}&since=cur_{db.middle_seq}&limit={PAGE}"


# -- the TUI ------------------------------------------------------------------------------


def tui_figure(big: Db, small: Db, runs: int, now_ms: int) -> Comparison:
    """Fresh starts of the app on each database in turn, after one start to warm up."""
    progress("timing the TUI's first screen ...")
    asyncio.run(first_screen(small.path, now_ms))
    history: list[float] = []
    baseline: list[float] = []
    for run in range(runs):
        order = [(big, history), (small, baseline)]
        for db, into in order if run % 2 == 0 else reversed(order):
            into.append(asyncio.run(first_screen(db.path, now_ms)))
    name = f"TUI first screen, {STUCK_ROWS:,} stuck rows on top"
    return Comparison(name, 1.0, history, baseline)


# -- the table ----------------------------------------------------------------------------


def table(figures: list[Comparison], bare: list[float], rows: int, runs: int, load: str) -> str:
    head = [
        f"| figure | history: {rows:,} rows | target | baseline: {BASELINE_ROWS:,} rows"
        " | history/baseline | met |",
        "|---|---|---|---|---|---|",
    ]
    notes = [
        "",
        f"- {machine_line()}, SQLite {sqlite3.sqlite_version}",
        f"- history: {rows:,} handed-off rows over {HISTORY_TARGETS} targets, plus"
        f" {STUCK_ROWS:,} stuck rows (half queued in backoff, half failed) over"
        f" {STUCK_TARGETS} targets and {DUE_TARGETS * DUE_PER_TARGET} due messages; the"
        f" baseline the same with {BASELINE_ROWS:,} handed-off rows; no ANALYZE statistics,"
        " as the daemon leaves its file",
        f"- each cell: median over {runs} runs of each run's median call [range over runs];"
        " the ratio is taken within each run",
        f"- the HTTP floor: a bare twisted.web GET route (bench/history_http.py), same client,"
        f" timed in the same slices as GET /swarm/message: {spread(bare, duration)}",
        f"- load average (1/5/15 min) at start: {load}; at end: {load_average()}",
    ]
    return "\n".join(head + [f.row() for f in figures] + notes)


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, quick="100,000 rows, 3 runs", runs=None)
    parser.add_argument("--rows", type=int, default=None, help="delivered rows (1,000,000)")
    parser.add_argument("--runs", type=int, default=None, help="runs of every figure (5)")
    args = parse(parser, argv)
    rows = args.rows or (QUICK_ROWS if args.quick else 1_000_000)
    runs = args.runs or (3 if args.quick else 5)
    now_ms = int(time.time() * 1000)
    started, load = time.perf_counter(), load_average()
    with scratch_dir("history") as work:
        big = build("history", work / "history.db", rows, now_ms)
        small = build("baseline", work / "baseline.db", BASELINE_ROWS, now_ms)
        try:
            tick, inbox, message, sweep, snapshot = storage_figures(big, small, runs, now_ms)
            (http_message, *http_scale), bare = http_figures(big, small, runs, work)
            tui = tui_figure(big, small, runs, now_ms)
            figures = [tick, inbox, message, http_message, tui, sweep, snapshot, *http_scale]
        finally:
            big.repo.close()
            small.repo.close()
    progress(f"done in {time.perf_counter() - started:.0f} s")
    print(table(figures, bare, rows, runs, load))


if __name__ == "__main__":
    main()
