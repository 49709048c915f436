"""``pigeon names``, ``pigeon name set NAME SESSION`` and ``pigeon name release NAME``: the
names sessions hold.

``names`` reads the database, as ``ls`` does.  ``name set`` goes through the daemon
(``POST /swarm/names``): only the daemon can ask opencode whether the session holding a
name still exists, which decides whether the name may move without ``--force``.  ``name
release`` goes through it too (``DELETE /swarm/names/NAME``), so that every change to a
name is made, and logged, in one place.  Every field is escaped like every ``pigeon``
table; ``--json`` is exact.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any, Final

from pigeond.cli.daemon_call import add_daemon_options, ask_daemon
from pigeond.cli.daemon_call import fail as _fail
from pigeond.cli.presentation import format_time, table_lines
from pigeond.model import NAME_RE, SESSION_ID_RE
from pigeond.storage import SwarmRepository
from pigeond.terminal import json_visible, visible

NAMES_COLUMNS: Final = ("name", "session", "since", "last_seen")
EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


def add_names_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], db: argparse.ArgumentParser
) -> None:
    """Declare ``pigeon names``, ``pigeon name set`` and ``pigeon name release`` (``db``: the
    shared ``--db`` option)."""
    names = sub.add_parser(
        "names", parents=[db], help="the names sessions hold: session, since, last seen"
    )
    names.add_argument("--json", action="store_true", help="a JSON list of objects")
    name = sub.add_parser("name", help="give a name to a session, or free it (via the daemon)")
    verbs = name.add_subparsers(dest="verb", metavar="VERB", required=True)
    text = (
        "give NAME to SESSION: free, or held by a session opencode no longer has;"
        " held by a live one only with --force"
    )
    claim = verbs.add_parser("set", help=text, description=text)
    claim.add_argument("name", metavar="NAME", help=f"the name ({NAME_RE.pattern})")
    claim.add_argument("session", metavar="SESSION", help="the session (ses_...)")
    claim.add_argument("--force", action="store_true", help="take it even from a live session")
    add_daemon_options(claim)
    text = "free NAME, whoever holds it; with --session, only if that session holds it"
    release = verbs.add_parser("release", help=text, description=text)
    release.add_argument("name", metavar="NAME", help=f"the name ({NAME_RE.pattern})")
    release.add_argument("--session", metavar="SESSION", help="release only if SESSION holds it")
    add_daemon_options(release)


def cmd_names(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    entries = repo.names()
    if args.json:
        text = json.dumps([e.view() for e in entries], indent=2, ensure_ascii=False)
        print(json_visible(text))
        return EXIT_OK
    rows = [
        [e.name, e.session, format_time(e.claimed_at), format_time(e.last_seen_at)] for e in entries
    ]
    for line in table_lines(NAMES_COLUMNS, rows):
        print(line)
    return EXIT_OK


def cmd_name(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """``name set`` or ``name release``: the daemon's answer on one line; exit 1 when it
    refuses (409: held by another session; 404: nobody holds the name to release)."""
    if not NAME_RE.fullmatch(args.name):
        return _fail(f"name {args.verb}: NAME must match {NAME_RE.pattern}", EXIT_USAGE)
    session = args.session
    if session is not None and not SESSION_ID_RE.fullmatch(session):
        return _fail(f"name {args.verb}: SESSION must match {SESSION_ID_RE.pattern}", EXIT_USAGE)
    answer = ask_daemon(args, env, f"name {args.verb}", _request(args))
    if isinstance(answer, int):
        return answer
    print(visible(_answer_line(args, answer)))
    return EXIT_OK


def _request(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None]:
    """The verb's request: method, path (the name and session are checked already, so
    neither needs quoting) and body."""
    if args.verb == "release":
        query = "" if args.session is None else f"?session={args.session}"
        return "DELETE", f"/swarm/names/{args.name}{query}", None
    return "POST", "/swarm/names", {"name": args.name, "session": args.session, "force": args.force}


def _answer_line(args: argparse.Namespace, body: Mapping[str, object]) -> str:
    if args.verb == "release":
        return f"{args.name} released (was {body.get('session')})"
    line = f"{args.name} -> {args.session}"
    if body.get("previous"):
        line += f" (taken from {body['previous']})"
    if body.get("released"):
        line += f" ({args.session} gave up {body['released']})"
    return line
