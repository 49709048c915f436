"""The adversarial review's table, re-run at full size against the current pigeond.

    .venv/bin/python -m bench.abuse_table [--quick]

Each row starts its own pigeond subprocess (testkit/daemon_process.py) in a fresh temporary
directory, on 127.0.0.1, with the defaults unless the row says otherwise, and measures
from the outside what the review says must be true:

1. slowloris: 1,100 connections trickling a byte every 5 s for ~30 s into a daemon
   started with a soft open-files limit of 1024, /health probed once a second;
2. 2,000 idle connections (at a soft limit of 1024 the daemon may raise, and at a fixed
   1024), /health probed 150 times;
3. inbox memory: 1,000 handed-off messages of 256 KiB for one session, 16 clients that
   ask for all of them and never read, one reader paging through: peak RSS and /health;
4. another process holding SQLite's write lock for 20 s: /health latency and sends;
5. the database file deleted under the daemon: 503s, a critical line, a second daemon;
6. 10 messages of 262 KB queued for one target: the largest prompt handed to opencode;
7. the disk filling up while delivering (a tmpfs; needs root): prompts per message;
8. SIGTERM while a hand-off outlasts stop_timeout_s: exit code, log, message state.

A stand-in opencode (testkit/fake_opencode.py) takes the prompts where a row needs one.
``--quick`` runs every row at a smaller size, as a smoke check.  Prints one markdown
table (row, what was measured, the figure, the target, met) and the machine it ran on.

This module is the command and the table; the rows are in bench/abuse_connections.py
(1-2), bench/abuse_storage.py (3-5) and bench/abuse_delivery.py (6-8), on what they share
in bench/abuse_probes.py.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable

from bench.abuse_connections import row_idle, row_slowloris
from bench.abuse_delivery import row_batch, row_full_disk, row_sigterm
from bench.abuse_probes import FULL, QUICK, Row, Size
from bench.abuse_storage import row_deleted_database, row_inbox_memory, row_write_lock
from bench.harness import arguments, machine_line, markdown_table, parse
from testkit.process_stats import hard_nofile

# -- the table -------------------------------------------------------------------------------


def run_row(number: str, measure: Callable[[], Row]) -> Row:
    """One row, timed; an exception becomes the row's figure instead of ending the bench."""
    started = time.monotonic()
    print(f"row {number} ...", file=sys.stderr, flush=True)
    try:
        row = measure()
    except Exception as e:  # the bench goes on with the next row
        row = Row(
            number, "(see the row's function)", f"error: {type(e).__name__}: {e}"[:400], "", "NO"
        )
    print(f"row {number} done in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    return row


def rows(size: Size) -> list[Row]:
    plan: list[tuple[str, Callable[[], Row]]] = [
        ("1", lambda: row_slowloris(size)),
        ("2a", lambda: row_idle(size, fixed=False)),
        ("2b", lambda: row_idle(size, fixed=True)),
        ("3", lambda: row_inbox_memory(size)),
        ("4", lambda: row_write_lock(size)),
        ("5", lambda: row_deleted_database(size)),
        ("6", lambda: row_batch(size)),
        ("7", lambda: row_full_disk(size)),
        ("8", lambda: row_sigterm(size)),
    ]
    return [run_row(number, measure) for number, measure in plan]


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str] | None = None) -> None:
    args = parse(arguments(__doc__, quick="every row at a smaller size", runs=None), argv)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this side holds 2,000 sockets
    table = rows(QUICK if args.quick else FULL)
    print(f"pigeond under abuse, {'quick' if args.quick else 'full'} size")
    print(f"{machine_line()}; open-files hard limit {hard_nofile()}\n")
    head = ("row", "what was measured", "figure", "target", "met")
    cells = [(r.number, cell(r.measured), cell(r.figure), cell(r.target), r.met) for r in table]
    print("\n".join(markdown_table(head, cells)))


if __name__ == "__main__":
    main()
