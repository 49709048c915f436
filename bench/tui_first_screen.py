"""How long pigeon-tui takes to show its first screen, with 100 and with 100,000 stuck rows.

    .venv/bin/python -m bench.tui_first_screen [--rows 100000] [--runs 5] [--quick]

The first screen is shown when the app has put its first database snapshot on
screen (overview, per-target tables and the message window) and refreshed the screen.
Headless (``App.run_test``), median of several starts of each size, interleaved.
bench/history_table.py times the same first screen on top of a million delivered rows.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from bench.harness import arguments, parse, scratch_dir, spread
from pigeond.storage import open_database
from pigeond.storage.synthetic import add_stuck_rows
from pigeond_tui.app import PigeonApp

NOW_MS = 1_793_491_200_000
TIMEOUT_S = 60.0


def build(path: Path, rows: int) -> None:
    conn = open_database(path)
    add_stuck_rows(conn, queued=rows // 2, failed=rows - rows // 2, targets=100, now_ms=NOW_MS)
    conn.close()


async def first_screen(db: Path, now_ms: int = NOW_MS) -> float:
    """Seconds from starting the app to its first snapshot on screen: the snapshot read in
    the worker thread, put in the widgets, and the screen refreshed from them, which the
    last ``pilot.pause()`` waits for (it ends with one 20 ms check that the app is idle, so
    the figure errs high by that much): what an operator waits for to see data."""
    app = PigeonApp(db, clock=lambda: now_ms, interval=3600)
    started = time.perf_counter()
    async with app.run_test(size=(140, 45)) as pilot:
        while app.snapshot is None:
            if time.perf_counter() - started > TIMEOUT_S:
                raise TimeoutError(f"no first screen within {TIMEOUT_S} s")
            await pilot.pause(0.005)
        await pilot.pause()
        shown = time.perf_counter() - started
    return shown


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, quick="1,000 stuck rows", runs=5)
    parser.add_argument("--rows", type=int, default=None, help="stuck rows (100,000)")
    args = parse(parser, argv)
    rows = args.rows or (1_000 if args.quick else 100_000)
    with scratch_dir("tui") as tmp:
        small, large = tmp / "small.db", tmp / "large.db"
        build(small, 100)
        build(large, rows)
        times: dict[str, list[float]] = {"100": [], f"{rows:,}": []}
        for _ in range(args.runs):
            times["100"].append(asyncio.run(first_screen(small)))
            times[f"{rows:,}"].append(asyncio.run(first_screen(large)))
    print(f"first screen of pigeon-tui, {args.runs} starts each (headless), seconds")
    for rows, values in times.items():
        print(f"  {rows:>9} rows: median {spread(values, '{:.3f}'.format)}")
    small_m, large_m = (statistics.median(v) for v in times.values())
    print(f"  ratio large/small: {large_m / small_m:.2f}")


if __name__ == "__main__":
    main()
