"""How the arbiter's ready-targets query scales with delivered history: pigeond against the seed.

Run by hand (about half a minute for a million rows):

    .venv/bin/python -m bench.ready_targets [--rows 1000000] [--runs 5] [--quick]

Two databases are built, one with ``--small-rows`` and one with ``--rows``
delivered messages, each plus a few queued messages for ten targets.  The query
is timed through :meth:`SwarmRepository.ready_targets`, the call the arbiter
makes every tick, on three versions of each database:

* ``pigeond``: the database as pigeond builds it (idx_swarm_ready present);
* ``seed``: a copy holding only the seed daemon's indexes and no ANALYZE
  statistics, which is how the seed daemon left its file;
* ``seed+stats``: the same copy with the ANALYZE statistics kept, to show what
  running ANALYZE alone would have bought the seed (a skip-scan whose cost grows
  with the number of distinct targets in the history).

Each cell is the median time of one query over many repetitions.  A run times
every cell in ``--rounds`` short interleaved slices; ratios are taken within a
run, against the baseline measured in that same run, and summarised as the
median (and range) over ``--runs`` runs.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.harness import arguments, parse, per_run_medians, spread
from pigeond.model import NewMessage
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.synthetic import add_delivered_history, seed_baseline_copy

NOW_MS = 1_793_491_200_000
QUEUED_TARGETS = 10
QUEUED_PER_TARGET = 3
VARIANTS = ("pigeond", "seed", "seed+stats")
QUICK_ROWS = 10_000


@dataclass(frozen=True)
class Case:
    rows: int
    variant: str
    repo: SwarmRepository


def build(path: Path, rows: int, history_targets: int) -> SwarmRepository:
    """A pigeond database with ``rows`` delivered messages and a few due queued ones."""
    repo = SwarmRepository(open_database(path))
    add_delivered_history(repo.sqlite_connection, rows, history_targets, NOW_MS - 60_000)
    for t in range(QUEUED_TARGETS):
        for k in range(QUEUED_PER_TARGET):
            message = NewMessage(
                msg_id=f"msg_bench{t}_{k}",
                from_session="ses_bench_sender",
                to_session=f"ses_queued{t}",
                channel=None,
                kind="chat",
                priority="normal",
                reply_to=None,
                payload="bench",
            )
            repo.accept(message, NOW_MS - 1_000)
    return repo


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, quick="10,000 rows in the large database", runs=5)
    parser.add_argument("--rows", type=int, default=None, help="delivered rows, large db")
    parser.add_argument("--small-rows", type=int, default=100, help="delivered rows, small db")
    parser.add_argument("--history-targets", type=int, default=100, help="sessions in history")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds per case per run")
    parser.add_argument("--rounds", type=int, default=10, help="slices per case per run")
    parser.add_argument("--dir", type=Path, default=None, help="where to build (default: temp)")
    args = parse(parser, argv)
    args.rows = args.rows or (QUICK_ROWS if args.quick else 1_000_000)

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="pigeond-bench-ready-") as tmp:
        cases: list[Case] = []
        for rows in (args.small_rows, args.rows):
            began = time.perf_counter()
            repo = build(Path(tmp) / f"pigeond-{rows}.db", rows, args.history_targets)
            seed = seed_baseline_copy(repo.sqlite_connection, Path(tmp) / f"seed-{rows}.db")
            seed_stats = seed_baseline_copy(
                repo.sqlite_connection, Path(tmp) / f"seed-stats-{rows}.db", keep_statistics=True
            )
            print(f"built {rows:,} rows in {time.perf_counter() - began:.1f} s")
            cases += [
                Case(rows, "pigeond", repo),
                Case(rows, "seed", SwarmRepository(seed)),
                Case(rows, "seed+stats", SwarmRepository(seed_stats)),
            ]

        expected = sorted(f"ses_queued{t}" for t in range(QUEUED_TARGETS))
        print("\nplans (EXPLAIN QUERY PLAN of the ready-targets query):")
        for case in cases:
            found = sorted(case.repo.ready_targets(NOW_MS))
            if found != expected:
                raise SystemExit(f"{case.variant} at {case.rows} rows found {found}")
            plan = "; ".join(case.repo.explain_ready_targets(NOW_MS))
            print(f"  {case.rows:>9,}  {case.variant:<10}  {plan}")

        queries: list[Callable[[], object]] = [
            functools.partial(case.repo.ready_targets, NOW_MS) for case in cases
        ]
        # Short slices of every case in turn, so that a noisy moment on the machine falls
        # on all of them rather than on one.
        medians = per_run_medians(queries, args.runs, args.budget, args.rounds)
        timings = {
            (c.rows, c.variant): [s * 1e6 for s in m] for c, m in zip(cases, medians, strict=True)
        }

        print(f"\nmedian µs per query; {args.runs} runs, each cell the median of many calls")
        print(f"{'rows':>10}  {'variant':<10}  median [min .. max]  per run")
        for case in cases:
            values = timings[case.rows, case.variant]
            per_run = " ".join(f"{v:.1f}" for v in values)
            print(f"{case.rows:>10,}  {case.variant:<10}  {spread(values)}  {per_run}")

        def ratios(top: tuple[int, str], bottom: tuple[int, str]) -> list[float]:
            return [a / b for a, b in zip(timings[top], timings[bottom], strict=True)]

        small, large = args.small_rows, args.rows
        print(f"\nratios within each run (median [min .. max] over {args.runs} runs)")
        for variant in VARIANTS:
            label = f"{variant} {large:,}/{small:,} rows"
            print(f"  {label:<36}{spread(ratios((large, variant), (small, variant)))}")
        for variant in VARIANTS[1:]:
            label = f"{variant}/pigeond at {large:,} rows"
            print(f"  {label:<36}{spread(ratios((large, variant), (large, 'pigeond')))}")

        for case in cases:
            case.repo.close()


if __name__ == "__main__":
    main()
