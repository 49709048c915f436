"""How long pigeon-tui takes to show its first screen, with 100 and with 100,000 stuck rows.

    .venv/bin/python bench/tui_first_screen.py [--rows 100000] [--runs 5]

The first screen is shown when the app has put its first database snapshot on
screen (overview, per-target tables and the message window) and refreshed the screen.
Headless (``App.run_test``), median of several starts of each size, interleaved.
bench/history_table.py times the same first screen on top of a million delivered rows.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pigeond-tui-bench-") as tmp:
        small, large = Path(tmp) / "small.db", Path(tmp) / "large.db"
        build(small, 100)
        build(large, args.rows)
        times: dict[str, list[float]] = {"100": [], f"{args.rows:,}": []}
        for _ in range(args.runs):
            times["100"].append(asyncio.run(first_screen(small)))
            times[f"{args.rows:,}"].append(asyncio.run(first_screen(large)))
    print(f"first screen of pigeon-tui, {args.runs} starts each (headless), seconds")
    for rows, values in times.items():
        print(f"  {rows:>9} rows: median {statistics.median(values):.3f}"
              f"  [{min(values):.3f} .. {max(values):.3f}]")  # fmt: skip
    small_m, large_m = (statistics.median(v) for v in times.values())
    print(f"  ratio large/small: {large_m / small_m:.2f}")


if __name__ == "__main__":
    main()
