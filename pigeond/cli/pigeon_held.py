"""``pigeon threads``, ``pigeon held``, ``pigeon release`` and ``pigeon drop``: a person
deciding on what the conversation brakes hold.

``threads`` lists the threads, the latest first, with their hops (agents' messages in a
row without a person), turns, what is held in each, and the tokens and cost of the turns
their messages caused (pigeond/storage/costs.py); ``held`` the messages a brake
holds, each with its msg_id and why.  ``release MSG_ID`` delivers one and starts its
brake's count over (``--reset``, the default), raises its thread's limit by N
(``--raise N``) or lets only this one go (``--once``); ``drop MSG_ID`` cancels it, and its
sender is told it was dropped by a person.

Like ``pigeon policy release``, these act on the database directly, each decision one
conditional transaction (pigeond/storage/brake_holds.py), so they work with the daemon
stopped too; a running daemon hands a released message off at its next tick.  Fields are
escaped; ``--json`` is exact.  Exit codes: 0 done, 1 the message is unknown or not held
by a brake (or its brake has no limit to raise), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys

from pigeond.cli.held_views import (
    HELD_COLUMNS,
    THREADS_COLUMNS,
    dropped_line,
    held_cells,
    released_line,
    thread_cells,
    why_not_done,
)
from pigeond.cli.presentation import table_lines
from pigeond.model import MSG_ID_RE
from pigeond.storage import SwarmRepository
from pigeond.storage.brake_holds import HoldOutcome, ReleaseMode
from pigeond.storage.thread_costs import thread_view, threads_with_costs
from pigeond.terminal import json_visible, visible

EXIT_OK, EXIT_NOT_CHANGED, EXIT_USAGE = 0, 1, 2


def add_held_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], db: argparse.ArgumentParser
) -> None:
    """Declare the four commands on ``sub`` (``db`` is the shared ``--db`` option)."""
    threads = sub.add_parser(
        "threads", parents=[db], help="threads, the latest first: hops, turns, held"
    )
    threads.add_argument("--limit", type=int, default=100, metavar="N", help="at most N")
    threads.add_argument("--json", action="store_true", help="a JSON list of objects")
    held = sub.add_parser(
        "held", parents=[db], help="messages a conversation brake holds for a person"
    )
    held.add_argument("--thread", metavar="T", help="only thread T's")
    held.add_argument("--json", action="store_true", help="a JSON list of objects")
    text = "deliver a held message; its brake's count starts over unless told otherwise"
    release = sub.add_parser("release", parents=[db], help=text, description=text)
    release.add_argument("msg_id", metavar="MSG_ID")
    how = release.add_mutually_exclusive_group()
    how.add_argument(
        "--reset", dest="mode", action="store_const", const=ReleaseMode.RESET,
        help="the brake's count starts over (the default)",
    )  # fmt: skip
    how.add_argument(
        "--raise", dest="by", type=int, metavar="N",
        help="raise the thread's limit by N (hops, or tokens of its budget)",
    )  # fmt: skip
    how.add_argument(
        "--once", dest="mode", action="store_const", const=ReleaseMode.ONCE,
        help="deliver only this one; the next is held again",
    )  # fmt: skip
    text = "cancel a held message; its sender is told it was dropped by a person"
    drop = sub.add_parser("drop", parents=[db], help=text, description=text)
    drop.add_argument("msg_id", metavar="MSG_ID")


def _print_json(value: object) -> None:
    print(json_visible(json.dumps(value, indent=2, ensure_ascii=False)))


def cmd_threads(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    if args.limit < 1:
        print("pigeon: --limit must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    threads = threads_with_costs(repo, args.limit)
    if args.json:
        _print_json([thread_view(t, c) for t, c in threads])
        return EXIT_OK
    rows = [thread_cells(t, c, now_ms) for t, c in threads]
    for line in table_lines(THREADS_COLUMNS, rows):
        print(line)
    return EXIT_OK


def cmd_held(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    held = repo.held_messages(thread_id=args.thread)
    if args.json:
        _print_json([h.view() for h in held])
        return EXIT_OK
    rows = [held_cells(h, now_ms) for h in held]
    for line in table_lines(HELD_COLUMNS, rows):
        print(line)
    return EXIT_OK


def _msg_id(raw: str) -> str | None:
    if MSG_ID_RE.fullmatch(raw):
        return raw
    print(f"pigeon: MSG_ID must match {MSG_ID_RE.pattern}", file=sys.stderr)
    return None


def _not_done(repo: SwarmRepository, msg_id: str, outcome: HoldOutcome) -> int:
    """One line saying why nothing changed; exit 1."""
    why = why_not_done(repo, msg_id, outcome, "use --reset or --once")
    print(f"pigeon: {visible(msg_id)}: {visible(why)}", file=sys.stderr)
    return EXIT_NOT_CHANGED


def cmd_release(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    msg_id = _msg_id(args.msg_id)
    if msg_id is None:
        return EXIT_USAGE
    mode, by = args.mode or ReleaseMode.RESET, 0
    if args.by is not None:
        if args.by < 1:
            print("pigeon: --raise N needs N of at least 1", file=sys.stderr)
            return EXIT_USAGE
        mode, by = ReleaseMode.RAISE, args.by
    done = repo.release_brake_hold(msg_id, mode, by, now_ms)
    if done.outcome is not HoldOutcome.DONE:
        return _not_done(repo, msg_id, done.outcome)
    print(released_line(msg_id, mode, by))
    return EXIT_OK


def cmd_drop(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    msg_id = _msg_id(args.msg_id)
    if msg_id is None:
        return EXIT_USAGE
    outcome = repo.drop_brake_hold(msg_id, now_ms)
    if outcome is not HoldOutcome.DONE:
        return _not_done(repo, msg_id, outcome)
    print(dropped_line(msg_id))
    return EXIT_OK
