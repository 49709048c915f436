"""``pigeon routes``: which daemon delivers to which session, on a database several
daemons share (PostgreSQL: see docs/multi-host.md).  On a SQLite file, which one
daemon alone serves, the list is empty.  Every field is escaped like every ``pigeon``
table; ``--json`` is exact."""

from __future__ import annotations

import argparse
import json
from typing import Final

from pigeond.cli.presentation import format_time, table_lines
from pigeond.storage import SwarmRepository
from pigeond.terminal import json_visible

ROUTES_COLUMNS: Final = ("session", "daemon", "opencode_url", "last_seen")


def add_routes_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], db: argparse.ArgumentParser
) -> None:
    """Declare ``pigeon routes`` (``db``: the shared ``--db`` option)."""
    routes = sub.add_parser(
        "routes", parents=[db],
        help="which daemon delivers to which session (a database several daemons share)",
    )  # fmt: skip
    routes.add_argument("--json", action="store_true", help="a JSON list of objects")


def cmd_routes(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    entries = repo.routes()
    if args.json:
        print(json_visible(json.dumps([r.view() for r in entries], indent=2, ensure_ascii=False)))
        return 0
    rows = [[r.session, r.daemon, r.opencode_url, format_time(r.last_seen_at)] for r in entries]
    for line in table_lines(ROUTES_COLUMNS, rows):
        print(line)
    return 0
