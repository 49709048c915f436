"""What ``max_queued_bytes`` costs an accept, by the number of queued messages.

    .venv/bin/python -m bench.queue_bytes_table [--runs 5] [--accepts 200] [--quick]

The bound is checked in the accept's own transaction (pigeond/storage/queue_bytes.py): the
first accept of a group commit that has a bound reads the queue's bytes, a number the
database keeps in step by triggers (pigeond/storage/queue_bytes_schema.py) where it once
summed the payload bytes of every queued message, a walk of the queued rows.  For each
queue depth (``--depths``, queued messages of 500 bytes over 1,000 targets, on top of
100,000 delivered ones), a SQLite file in WAL mode
with ``synchronous=FULL`` as pigeond opens it is timed two ways, interleaved within a run:

* ``off``: ``accept_many`` of one small direct message with ``max_queued_bytes = 0``
  (the baseline: the transaction and its fsync);
* ``on``: the same with a bound far above the queue, so the sum is taken and passes;

the number read alone (``queued_bytes``, the query the bound adds), and the sum over the rows
it replaced (``summed_queued_bytes``; the two are checked equal).  Each cell is the median
over ``--accepts`` accepts in a run; ratios are ``on / off`` within a run; the table shows
the median over ``--runs`` runs, with the range of the ratios.  Prints markdown.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.harness import arguments, machine_line, markdown_table, median_range, parse, scratch_dir
from pigeond.model import NewMessage
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.engines.base import Connection
from pigeond.storage.queue_bytes import queued_bytes, summed_queued_bytes
from pigeond.storage.repository import Accept
from pigeond.storage.synthetic import add_delivered_history, add_queued_rows

NOW_MS = 1_793_491_200_000
HISTORY_ROWS = 100_000
TARGETS = 1_000
PAYLOAD_BYTES = 500
FAR_ABOVE = 10**15
DEPTHS = "0,1000,10000,100000"
QUICK_DEPTHS = "0,1000"
_ids = itertools.count()


@dataclass(frozen=True)
class RunFigures:
    off_ms: float
    on_ms: float
    read_ms: float
    sum_ms: float


def build(path: Path, depth: int) -> SwarmRepository:
    repo = SwarmRepository(open_database(path))
    conn = repo.sqlite_connection
    add_delivered_history(conn, HISTORY_ROWS, TARGETS, NOW_MS)
    if depth:
        add_queued_rows(conn, depth, TARGETS, NOW_MS, PAYLOAD_BYTES)
    return repo


def accept_ms(repo: SwarmRepository, bound: int) -> float:
    message = NewMessage(
        msg_id=f"msg_bench{next(_ids)}", from_session="ses_bench", to_session="ses_q1",
        channel=None, kind="chat", priority="normal", reply_to=None, payload="ping",
    )  # fmt: skip
    started = time.perf_counter()
    repo.accept_many([Accept(message, NOW_MS, max_queued_bytes=bound)])
    return (time.perf_counter() - started) * 1000


def read_ms(repo: SwarmRepository, read: Callable[[Connection], int]) -> float:
    started = time.perf_counter()
    read(repo.connection)
    return (time.perf_counter() - started) * 1000


def one_run(repo: SwarmRepository, accepts: int) -> RunFigures:
    off, on, reads, sums = [], [], [], []
    for _ in range(accepts):  # interleaved, so a slow moment of the disk hits both
        off.append(accept_ms(repo, 0))
        on.append(accept_ms(repo, FAR_ABOVE))
        reads.append(read_ms(repo, queued_bytes))
        sums.append(read_ms(repo, summed_queued_bytes))
    kept, summed = queued_bytes(repo.connection), summed_queued_bytes(repo.connection)
    if kept != summed:
        raise SystemExit(f"the queue's bytes kept ({kept}) are not their sum ({summed})")
    return RunFigures(*(statistics.median(v) for v in (off, on, reads, sums)))


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, quick="depths 0 and 1,000, 50 accepts a run", runs=5)
    parser.add_argument("--accepts", type=int, default=None, help="accepts a run (200)")
    parser.add_argument("--depths", default=None, help="queue depths (0,1000,10000,100000)")
    args = parse(parser, argv)
    accepts = args.accepts or (50 if args.quick else 200)
    depths = [int(d) for d in (args.depths or (QUICK_DEPTHS if args.quick else DEPTHS)).split(",")]
    print(f"{machine_line()}\n")
    head = ("queued messages", "accept, bound off (ms)", "accept, bound on (ms)",
            "on / off (range)", "the number read (ms)", "the sum it replaced (ms)")  # fmt: skip
    print("\n".join(markdown_table(head, [], ["---:"] * len(head))))
    with scratch_dir("queue-bytes") as scratch:
        for depth in depths:
            repo = build(scratch / f"d{depth}.db", depth)
            try:
                runs = [one_run(repo, accepts) for _ in range(args.runs)]
            finally:
                repo.close()
            ratios = [r.on_ms / r.off_ms for r in runs]
            print(
                f"| {depth:,} | {statistics.median(r.off_ms for r in runs):.2f}"
                f" | {statistics.median(r.on_ms for r in runs):.2f}"
                f" | {median_range(ratios, '{:.2f}')}"
                f" | {statistics.median(r.read_ms for r in runs):.3f}"
                f" | {statistics.median(r.sum_ms for r in runs):.3f} |"
            )
    print(
        f"\n- Each database: {HISTORY_ROWS:,} delivered messages, then the queued ones"
        f" ({PAYLOAD_BYTES} bytes each, {TARGETS:,} targets); one accept = one transaction"
        " with its fsync (no group: the worst case, one read per send).  Medians over"
        f" {accepts} accepts a run, then over {args.runs} runs."
    )


if __name__ == "__main__":
    main()
