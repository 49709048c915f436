"""``pigeon search``: messages by what they say, from the database (every session's).

The operator's side of ``GET /swarm/search``: the same full-text index and the same
word-for-word reading of the text (pigeond/storage/search.py), but over every
session's messages unless ``--session`` narrows it, since the operator may read the
whole queue anyway.  Fields are escaped like every ``pigeon`` table; ``--json`` is exact.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Final

from pigeond.cli.presentation import cut, message_cells, one_line, table_lines
from pigeond.model import StoredMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.search import MAX_SEARCH_LIMIT, SearchQueryError
from pigeond.terminal import json_visible, visible

SEARCH_COLUMNS: Final = ("msg_id", "state", "to", "from", "kind", "age", "payload")
PAYLOAD_WIDTH: Final = 60  # the payload's first line, cut to this many columns
EXIT_OK, EXIT_USAGE = 0, 2


def add_search_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], db: argparse.ArgumentParser
) -> None:
    """Declare ``pigeon search`` on ``sub`` (``db`` is the shared ``--db`` option)."""
    text = "messages with every word of TEXT in payload, kind, sender, target, channel or names"
    search = sub.add_parser("search", parents=[db], help=text, description=text + ", newest first")
    search.add_argument("text", metavar="TEXT", help="words, each searched for as it is written")
    search.add_argument("--session", metavar="S", help="only what S sent or received")
    search.add_argument("--state", help="only messages in this state")
    search.add_argument(
        "--limit",
        type=int,
        default=50,
        metavar="N",
        help=f"at most N, 1-{MAX_SEARCH_LIMIT} (default 50)",
    )
    search.add_argument(
        "--json", action="store_true", help="a JSON list of the inbox's fields and state"
    )


def search_cells(message: StoredMessage, now_ms: int) -> list[str]:
    """One row: the listing's columns, then the payload's first line, cut."""
    cells = message_cells(message, now_ms, SEARCH_COLUMNS[:-1])
    return [
        *cells,
        cut(one_line(message.payload.splitlines()[0] if message.payload else ""), PAYLOAD_WIDTH),
    ]


def cmd_search(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    if not 1 <= args.limit <= MAX_SEARCH_LIMIT:
        print(f"pigeon: --limit must be from 1 to {MAX_SEARCH_LIMIT}", file=sys.stderr)
        return EXIT_USAGE
    try:
        found = repo.search(args.text, session=args.session, state=args.state, limit=args.limit)
    except SearchQueryError as e:
        print(f"pigeon: {visible(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        rows = [{**m.inbox_view(), "state": m.state} for m in found]
        print(json_visible(json.dumps(rows, indent=2, ensure_ascii=False)))
        return EXIT_OK
    for line in table_lines(SEARCH_COLUMNS, [search_cells(m, now_ms) for m in found]):
        print(line)
    return EXIT_OK
