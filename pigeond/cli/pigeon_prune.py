"""``pigeon prune``: delete done history older than a cutoff, as the daemon's pruner does.

All of it at once, but in short transactions (``PRUNE_BATCH_ROWS`` rows each) so that a
running daemon's writes never wait long; then a SQLite file gives the freed pages back
to the file system, ``PRUNE_VACUUM_PAGES`` at a time.  PostgreSQL has no file of ours to
shrink: its autovacuum makes the space of the deleted rows reusable, so nothing is given
back there and the output says so instead of speaking of pages.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Final

from pigeond.cli.presentation import format_time, table_lines
from pigeond.storage import SwarmRepository
from pigeond.storage.retention import FileSize, cutoff_ms
from pigeond.terminal import json_visible

EXIT_OK, EXIT_USAGE = 0, 2
PRUNE_BATCH_ROWS: Final = 500  # rows per delete transaction
PRUNE_VACUUM_PAGES: Final = 1000  # pages per vacuum step, each one short write
PRUNABLE_COLUMNS: Final = ("scope", "state", "count", "oldest", "newest")


def cmd_prune(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    days: float = args.older_than_days
    if not (math.isfinite(days) and days > 0):
        print(
            "pigeon: --older-than-days must be more than 0 (retention_days = 0 keeps everything)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    cutoff = cutoff_ms(now_ms, days)
    groups = repo.prunable(cutoff)
    before = repo.file_size()
    pruned = pages = 0
    if not args.dry_run:
        while (batch := sum(repo.prune_batch(cutoff, PRUNE_BATCH_ROWS).values())) > 0:
            pruned += batch
            if batch < PRUNE_BATCH_ROWS:
                break
        while (given := repo.give_back_pages(PRUNE_VACUUM_PAGES)) > 0:  # 0 on PostgreSQL
            pages += given
            if given < PRUNE_VACUUM_PAGES:
                break
    after = repo.file_size()
    found = sum(g.count for g in groups)
    if args.json:
        shown = {
            "dry_run": args.dry_run,
            "older_than_days": days,
            "cutoff": cutoff,
            "prunable": [dataclasses.asdict(g) for g in groups],
            "prunable_total": found,
            "pruned": pruned,
            "pages_given_back": pages,
            "bytes_before": before.total_bytes,
            "bytes_after": after.total_bytes,
            "incremental_vacuum": after.incremental,
        }
        print(json_visible(json.dumps(shown, indent=2, ensure_ascii=False)))
        return EXIT_OK
    print(f"done messages last changed before {format_time(cutoff)} (older than {days:g} days):")
    rows = [
        [g.scope, g.state, str(g.count), format_time(g.oldest_at), format_time(g.newest_at)]
        for g in groups
    ]
    for line in table_lines(PRUNABLE_COLUMNS, rows) if rows else ["  (none)"]:
        print(line)
    if args.dry_run:
        print(f"would prune {found} messages (dry run: nothing changed); {_size(before)}")
        return EXIT_OK
    if repo.engine.reclaims_space_itself:
        print(
            f"pruned {pruned} messages; database {_size(before)} -> {_size(after)}"
            " (PostgreSQL's autovacuum makes the freed space reusable)"
        )
        return EXIT_OK
    print(
        f"pruned {pruned} messages; database {_size(before)} -> {_size(after)}"
        f" ({pages} free pages given back)"
    )
    if not after.incremental:
        print(
            "the database is not in incremental auto-vacuum mode yet: the freed pages are"
            " reused, and the file shrinks once pigeond's next start has converted it"
        )
    return EXIT_OK


def _size(size: FileSize) -> str:
    return f"{size.total_bytes / 2**20:.1f} MiB"
