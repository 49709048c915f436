"""``pigeon policy``: each session's consent, from the operator's side.

``pigeon policy`` lists every session that set a policy (with how many messages each
holds), ``pigeon policy show S`` one session's, ``pigeon policy set S POLICY [--allow
SENDER ...] [--steer | --no-steer]`` sets one (steering, when not named, stays as it
was), and ``pigeon policy release S`` releases what is held for S now (the policy
stays).  The writes go to the database directly, in one transaction each
with the waiting messages they hold or release (pigeond/storage/policies.py); a running
daemon reads the new policy within pigeond.api.policy.REFRESH_S seconds and applies it
once more to what it accepted meanwhile.  Fields are escaped; ``--json`` is exact.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Final

from pigeond.cli.consent_views import OPERATOR
from pigeond.cli.presentation import format_age, table_lines
from pigeond.consent import POLICIES, InboundPolicy, parse_allow, parse_policy
from pigeond.model import SESSION_ID_RE
from pigeond.storage import SwarmRepository
from pigeond.terminal import json_visible, visible

POLICY_COLUMNS: Final = ("session", "policy", "held", "allow", "steer", "set", "by")
EXIT_OK, EXIT_USAGE = 0, 2


def add_policy_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], db: argparse.ArgumentParser
) -> None:
    """Declare ``pigeon policy`` on ``sub`` (``db`` is the shared ``--db`` option)."""
    text = "each session's inbound policy (accept, hold, refuse) and its held messages"
    policy = sub.add_parser("policy", parents=[db], help=text, description=text)
    verbs = policy.add_subparsers(dest="policy_command", metavar="ACTION")
    listing = verbs.add_parser("ls", parents=[db], help="every session that set a policy")
    listing.add_argument("--json", action="store_true", help="a JSON list of objects")
    show = verbs.add_parser("show", parents=[db], help="one session's policy")
    show.add_argument("session", metavar="SESSION")
    show.add_argument("--json", action="store_true", help="one JSON object")
    put = verbs.add_parser(
        "set", parents=[db], help="set a session's policy; it applies to what waits now"
    )
    put.add_argument("session", metavar="SESSION")
    put.add_argument("policy", choices=POLICIES)
    put.add_argument(
        "--allow",
        action="append",
        metavar="SENDER",
        help="a sender that always gets through (repeat; replaces the list)",
    )
    put.add_argument("--clear-allow", action="store_true", help="empty the allow-list")
    put.add_argument(
        "--steer",
        action=argparse.BooleanOptionalAction,
        help="whether an urgent message asked to steer may go into the session's running"
        " turn (opencode 2.x); off by default",
    )
    release = verbs.add_parser(
        "release", parents=[db], help="release the messages held for a session now"
    )
    release.add_argument("session", metavar="SESSION")


def _session(raw: str) -> str:
    if not SESSION_ID_RE.fullmatch(raw):
        raise ValueError(f"SESSION must match {SESSION_ID_RE.pattern}")
    return raw


def _row(policy: InboundPolicy, held: int, now_ms: int) -> list[str]:
    """One table row, raw: table_lines escapes every cell."""
    when = format_age(now_ms - policy.updated_at) if policy.updated_at else "-"
    return [
        policy.session, policy.policy.value, str(held),
        ",".join(policy.allow) or "-", "on" if policy.steer else "off", when,
        policy.updated_by or "-",
    ]  # fmt: skip


def _print(rows: list[tuple[InboundPolicy, int]], now_ms: int, as_json: bool) -> None:
    if as_json:
        views = [p.view() | {"held": held} for p, held in rows]
        print(json_visible(json.dumps(views, indent=2, ensure_ascii=False)))
        return
    for line in table_lines(POLICY_COLUMNS, [_row(p, held, now_ms) for p, held in rows]):
        print(line)


def cmd_policy(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    verb = args.policy_command or "ls"
    try:
        session = _session(args.session) if verb != "ls" else ""
        if verb == "set":
            # None: as stored when written (merged in the write's transaction)
            allow: tuple[str, ...] | None = () if args.clear_allow else None
            if args.allow:
                allow = parse_allow(args.allow)
            change = repo.set_policy(
                session, parse_policy(args.policy), allow, now_ms, OPERATOR, args.steer
            )
            print(
                f"{visible(session)} {change.policy.policy.value}"
                f"{', steering allowed' if change.policy.steer else ''}:"
                f" {change.held} held, {change.released} released"
            )
            return EXIT_OK
    except ValueError as e:
        print(f"pigeon: {visible(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    if verb == "release":
        print(f"{visible(session)}: {repo.release_held(session, now_ms)} released")
        return EXIT_OK
    held = repo.held_counts()
    if verb == "show":
        policy = repo.policy_of(session)
        if args.json:
            view = policy.view() | {"held": held.get(session, 0)}
            print(json_visible(json.dumps(view, indent=2, ensure_ascii=False)))
            return EXIT_OK
        _print([(policy, held.get(session, 0))], now_ms, False)
        return EXIT_OK
    _print([(p, held.get(p.session, 0)) for p in repo.policies()], now_ms, args.json)
    return EXIT_OK
