"""``pigeon permissions`` and ``pigeon permission answer ID once|always|reject``: the
permission requests sessions wait on while they handle swarm messages.

``permissions`` reads the database, as ``ls`` does: one line per open request, oldest
first (``per_… ses_B waits for permission: bash `rm -rf build`, while handling msg_… from
ses_A``), every field escaped; ``--json`` is exact.  ``permission answer`` goes through
the daemon (``POST /swarm/permissions/ID/reply``): only it can reach opencode, in the
instance that holds the request.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping

from pigeond.cli.daemon_call import add_daemon_options, ask_daemon, fail, permission_reply
from pigeond.cli.presentation import format_age
from pigeond.model import PERMISSION_ANSWERS, PERMISSION_ID_RE
from pigeond.storage import SwarmRepository
from pigeond.terminal import json_visible, visible

EXIT_OK, EXIT_USAGE = 0, 2


def add_permissions_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], db: argparse.ArgumentParser
) -> None:
    """Declare ``pigeon permissions`` and ``pigeon permission answer`` (``db``: the shared
    ``--db`` option)."""
    listing = sub.add_parser(
        "permissions", parents=[db],
        help="permission requests sessions wait on while they handle swarm messages",
    )  # fmt: skip
    listing.add_argument("--json", action="store_true", help="a JSON list of objects")
    permission = sub.add_parser(
        "permission", help="answer a permission request (via the daemon, to opencode)"
    )
    verbs = permission.add_subparsers(dest="verb", metavar="VERB", required=True)
    text = (
        "answer request ID: once (this call), always (calls like it, until opencode"
        " restarts) or reject"
    )
    answer = verbs.add_parser("answer", help=text, description=text)
    answer.add_argument("request_id", metavar="ID", help="the request's id (per_...)")
    answer.add_argument("answer", metavar="ANSWER", help=" | ".join(PERMISSION_ANSWERS))
    add_daemon_options(answer)


def permission_lines(repo: SwarmRepository, now_ms: int) -> list[str]:
    """One line per open request, oldest first, escaped."""
    return [
        visible(f"{r.request_id}  {r.describe()} ({format_age(now_ms - r.asked_at)} ago)")
        for r in repo.open_permissions()
    ]


def cmd_permissions(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    if args.json:
        views = [r.view() for r in repo.open_permissions()]
        print(json_visible(json.dumps(views, indent=2, ensure_ascii=False)))
        return EXIT_OK
    lines = permission_lines(repo, now_ms)
    for line in lines or ["no session waits for a permission answer"]:
        print(line)
    return EXIT_OK


def cmd_permission(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """``permission answer``: the daemon's answer on one line; exit 1 when it refuses (404:
    no such open request; 409: no longer pending), 3 when opencode or the daemon fails."""
    if not PERMISSION_ID_RE.fullmatch(args.request_id):
        return fail(f"permission answer: ID must match {PERMISSION_ID_RE.pattern}", EXIT_USAGE)
    if args.answer not in PERMISSION_ANSWERS:
        choices = ", ".join(PERMISSION_ANSWERS)
        return fail(f"permission answer: ANSWER must be one of {choices}", EXIT_USAGE)
    request = permission_reply(args.request_id, args.answer)
    answer = ask_daemon(args, env, "permission answer", request)
    if isinstance(answer, int):
        return answer
    print(visible(f"{args.request_id}: answered {args.answer}"))
    return EXIT_OK
