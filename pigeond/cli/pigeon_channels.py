"""``pigeon channels`` and ``pigeon channel show|history|join|leave``: channels, their
members and what was sent to them.

``channels``, ``channel show`` and ``channel history`` read the database, as ``ls`` does.
``channel join`` and ``channel leave`` go through the daemon (``POST`` and ``DELETE
/swarm/channels/CHANNEL/members``): only the daemon can ask opencode whether the session
exists, knows who holds an ``@name`` now, and has the member limit
(``max_channel_members``, its configuration, which ``pigeon`` does not read); and so both
write the way the daemon logs them.  Every field is escaped like every ``pigeon`` table;
``--json`` is exact.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from typing import Any, Final

from pigeond.cli.daemon_call import add_daemon_options, ask_daemon
from pigeond.cli.daemon_call import fail as _fail
from pigeond.cli.presentation import cut, format_time, one_line, table_lines
from pigeond.model import CHANNEL_RE, NAME_MARK, NAME_RE, SESSION_ID_RE
from pigeond.storage import SwarmRepository
from pigeond.terminal import json_visible, visible

CHANNELS_COLUMNS: Final = ("channel", "members", "last_message")
MEMBERS_COLUMNS: Final = ("session", "name", "joined")
HISTORY_COLUMNS: Final = ("msg_id", "from", "kind", "priority", "sent", "payload")
# The verbs that go through the daemon; ``show`` and ``history`` read the database.
DAEMON_VERBS: Final = ("join", "leave")
DEFAULT_HISTORY_LIMIT: Final = 50
MAX_HISTORY_LIMIT: Final = 1000  # as the history route's own page limit
PAYLOAD_WIDTH: Final = 40  # the history table's payload, cut to this many columns
# A history cursor: the accept number of the last message read, as the history route's
# next_cursor gives it (``GET /swarm/channel/CHANNEL?since=cur_N``).
CURSOR_RE: Final = re.compile(r"^cur_([0-9]{1,18})$")
EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


def add_channels_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], db: argparse.ArgumentParser
) -> None:
    """Declare ``pigeon channels`` and ``pigeon channel VERB`` (``db``: the shared ``--db``
    option, which only the verbs reading the database take)."""
    channels = sub.add_parser(
        "channels", parents=[db], help="the channels with members: how many, last message"
    )
    channels.add_argument("--json", action="store_true", help="a JSON list of objects")
    channel = sub.add_parser(
        "channel", help="one channel's members or history; join or leave (via the daemon)"
    )
    verbs = channel.add_subparsers(dest="verb", metavar="VERB", required=True)
    show = verbs.add_parser("show", parents=[db], help="its members: name, when each joined")
    _channel_argument(show)
    show.add_argument("--json", action="store_true", help="one JSON object")
    text = "what was sent to it, oldest first (each member got its own copy)"
    history = verbs.add_parser("history", parents=[db], help=text, description=text)
    _channel_argument(history)
    history.add_argument(
        "--since", metavar="C", help="only after this cursor (the next_cursor printed last time)"
    )
    history.add_argument(
        "--limit", type=int, default=DEFAULT_HISTORY_LIMIT, metavar="N",
        help=f"at most N, 1-{MAX_HISTORY_LIMIT} (default {DEFAULT_HISTORY_LIMIT})",
    )  # fmt: skip
    history.add_argument("--json", action="store_true", help="one JSON object")
    text = "make SESSION a member: it gets a copy of every message sent to the channel from now"
    join = verbs.add_parser("join", help=text, description=text)
    _channel_argument(join)
    join.add_argument("session", metavar="SESSION", help="the session (ses_... or @name)")
    add_daemon_options(join)
    text = "SESSION is no longer a member (copies already queued for it still go)"
    leave = verbs.add_parser("leave", help=text, description=text)
    _channel_argument(leave)
    leave.add_argument("session", metavar="SESSION", help="the session (ses_...)")
    add_daemon_options(leave)


def _channel_argument(verb: argparse.ArgumentParser) -> None:
    verb.add_argument("channel", metavar="CHANNEL", help=f"the channel ({CHANNEL_RE.pattern})")


def _print_json(value: object) -> None:
    print(json_visible(json.dumps(value, indent=2, ensure_ascii=False)))


# -- from the database ---------------------------------------------------------------


def cmd_channels(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    entries = repo.channels()
    if args.json:
        _print_json([e.view() for e in entries])
        return EXIT_OK
    rows = [[e.channel, str(e.members), format_time(e.last_message_at)] for e in entries]
    for line in table_lines(CHANNELS_COLUMNS, rows):
        print(line)
    return EXIT_OK


def cmd_channel(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    """``channel show`` or ``channel history`` (the verbs that read the database)."""
    if not CHANNEL_RE.fullmatch(args.channel):
        return _fail(f"channel {args.verb}: CHANNEL must match {CHANNEL_RE.pattern}", EXIT_USAGE)
    if args.verb == "history":
        return _history(repo, args)
    members = repo.channel_members(args.channel)
    if args.json:
        _print_json({"channel": args.channel, "members": [m.view() for m in members]})
        return EXIT_OK
    rows = [[m.session, m.name or "-", format_time(m.joined_at)] for m in members]
    for line in table_lines(MEMBERS_COLUMNS, rows):
        print(line)
    return EXIT_OK


def _history(repo: SwarmRepository, args: argparse.Namespace) -> int:
    """One page of the channel's history; the cursor to go on from on stderr, as ``inbox``
    prints it, so stdout stays the table."""
    if not 1 <= args.limit <= MAX_HISTORY_LIMIT:
        return _fail(f"--limit must be between 1 and {MAX_HISTORY_LIMIT}", EXIT_USAGE)
    after = 0
    if args.since is not None:
        found = CURSOR_RE.fullmatch(args.since)
        if found is None:
            return _fail("--since must be a cursor cur_N (a next_cursor)", EXIT_USAGE)
        after = int(found.group(1))
    page = repo.channel_history(args.channel, after, args.limit)
    last = page.messages[-1].accept_seq if page.messages else None
    cursor = args.since if last is None else f"cur_{last}"
    if args.json:
        _print_json({
            "channel": args.channel, "messages": [m.inbox_view() for m in page.messages],
            "has_more": page.has_more, "next_cursor": cursor,
        })  # fmt: skip
        return EXIT_OK
    rows = [
        [m.msg_id, m.from_session, m.kind, m.priority, format_time(m.created_at),
         cut(one_line(m.payload), PAYLOAD_WIDTH)]
        for m in page.messages
    ]  # fmt: skip
    for line in table_lines(HISTORY_COLUMNS, rows):
        print(line)
    if cursor is not None:  # None: nothing was ever sent to the channel
        more = " (more: run again with --since)" if page.has_more else ""
        print(f"next_cursor: {visible(cursor)}{more}", file=sys.stderr)
    return EXIT_OK


# -- through the daemon --------------------------------------------------------------


def cmd_membership(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """``channel join`` or ``channel leave``: the daemon's answer on one line; exit 1 when
    it refuses (409: the channel is full; 404: no such session, nobody holds the name, or
    not a member)."""
    verb = f"channel {args.verb}"
    if not CHANNEL_RE.fullmatch(args.channel):
        return _fail(f"{verb}: CHANNEL must match {CHANNEL_RE.pattern}", EXIT_USAGE)
    if not _session_ok(args.session, by_name=args.verb == "join"):
        hint = " or @NAME" if args.verb == "join" else ""
        return _fail(f"{verb}: SESSION must match {SESSION_ID_RE.pattern}{hint}", EXIT_USAGE)
    answer = ask_daemon(args, env, verb, _request(args))
    if isinstance(answer, int):
        return answer
    print(visible(_answer_line(args, answer)))
    return EXIT_OK


def _session_ok(session: str, *, by_name: bool) -> bool:
    if by_name and session.startswith(NAME_MARK):
        return NAME_RE.fullmatch(session[len(NAME_MARK) :]) is not None
    return SESSION_ID_RE.fullmatch(session) is not None


def _request(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None]:
    """The verb's request: method, path (channel and session are checked already, so
    neither needs quoting) and body."""
    members = f"/swarm/channels/{args.channel}/members"
    if args.verb == "leave":
        return "DELETE", f"{members}/{args.session}", None
    return "POST", members, {"session": args.session}


def _answer_line(args: argparse.Namespace, body: Mapping[str, object]) -> str:
    session = str(body.get("session") or args.session)
    who = session if session == args.session else f"{args.session} ({session})"
    if args.verb == "leave":
        return f"{who} left {args.channel}"
    members = f"{body.get('members')} members"
    if body.get("joined") is False:
        return f"{who} is a member of {args.channel} already ({members})"
    return f"{who} joined {args.channel} ({members})"
