"""``pigeon``: the operator's scriptable view of pigeond's queue.

It reads the database directly (a SQLite file, which WAL makes safe to read while
the daemon runs, or a ``postgresql://`` URL, never printed with its password) and
changes messages only through conditional writes in the storage package; ``prune``
(``pigeon_prune``) deletes done history older than a cutoff, as the daemon's pruner
does; ``inbox``, ``send``, ``name`` and ``channel join|leave`` go through the daemon's
HTTP API; ``install-plugin`` puts the opencode plugin in place, ``install-claude``
registers pigeond with Claude Code.  Text output shows
every message field through ``terminal.visible`` (control characters, escape
sequences and bidi overrides escaped); ``--json`` output is exact.  Exit codes: 0
every named message changed (or the read, prune or install worked), 1 any did not,
2 usage or an unusable database (PostgreSQL out of reach included), 3 the daemon is
unreachable (``inbox``, ``name``, ``channel join|leave``).

This module runs the subcommands.  Their options are declared in
``pigeon_args``; the actions (which states each applies to, their words, the
conditional writes) in ``actions``; how a message is shown (columns, ages,
times, the detail view) in ``presentation``, which ``pigeon-tui`` uses too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlencode

from pigeond.cli import install_claude, install_codex, install_plugin, pigeon_send
from pigeond.cli.actions import (
    ACTIONS,
    NoDatabase,
    outcome_line,
    queued_per_target,
    resolve_db,
)
from pigeond.cli.daemon_call import ask_daemon
from pigeond.cli.pigeon_args import build_parser
from pigeond.cli.pigeon_channels import DAEMON_VERBS, cmd_channel, cmd_channels, cmd_membership
from pigeond.cli.pigeon_held import cmd_drop, cmd_held, cmd_release, cmd_threads
from pigeond.cli.pigeon_names import cmd_name, cmd_names
from pigeond.cli.pigeon_permissions import cmd_permission, cmd_permissions
from pigeond.cli.pigeon_policy import cmd_policy
from pigeond.cli.pigeon_prune import cmd_prune
from pigeond.cli.pigeon_routes import cmd_routes
from pigeond.cli.pigeon_search import cmd_search
from pigeond.cli.presentation import (
    CHANNEL_TITLE,
    DELIVERIES_TITLE,
    LS_COLUMNS,
    OWED_COLUMNS,
    QUEUE_COLUMNS,
    cut,
    detail,
    format_time,
    json_row,
    message_cells,
    one_line,
    owed_cells,
    queue_cells,
    state_counts,
    table_lines,
)
from pigeond.config import SYSTEM_DB
from pigeond.credentials import SYSTEM_SOCKET
from pigeond.db_url import without_password
from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.operator import ActionOutcome, open_existing
from pigeond.terminal import json_visible, visible

EXIT_OK, EXIT_NOT_CHANGED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
ERROR_WIDTH = 40  # ls and inbox: last_error and payload cut to this many columns


class UsageError(ValueError):
    pass


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, indent: str = "") -> None:
    """Aligned columns; the cells are escaped there, so callers pass raw values."""
    for line in table_lines(header, rows, indent=indent):
        print(line)


def print_json(value: object) -> None:
    """Exact data; the characters a terminal could act on are ``\\uNNNN`` escapes, which
    decode to the same strings."""
    print(json_visible(json.dumps(value, indent=2, ensure_ascii=False)))


# -- subcommands ---------------------------------------------------------------


def cmd_ls(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    messages = repo.list_messages(
        state=args.state, target=args.target, sender=args.sender, limit=args.limit
    )
    if args.json:
        print_json([json_row(m, now_ms) for m in messages])
        return EXIT_OK
    widths = {"last_error": ERROR_WIDTH}
    print_table(LS_COLUMNS, [message_cells(m, now_ms, LS_COLUMNS, widths) for m in messages])
    return EXIT_OK


def cmd_show(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    message = repo.get(args.msg_id)
    if message is None:
        print(f"pigeon: {visible(args.msg_id)}: unknown message", file=sys.stderr)
        return EXIT_NOT_CHANGED
    shown = detail(message, now_ms)
    waiting = repo.permission_waited_on(message.msg_id)  # its target waits on a permission
    if args.json:
        extra: dict[str, object] = {"receipt": message.receipt(), "envelope": shown.envelope}
        extra["waiting_on_permission"] = None if waiting is None else waiting.view()
        print_json({**dataclasses.asdict(message), **extra})
        return EXIT_OK
    if waiting is not None:
        shown.fields.append(("waiting_on", waiting.waiting_on))
    for name, value in shown.fields:
        print(f"{name.ljust(shown.name_width)}  {visible(value)}")
    print("\npayload:")
    print(visible(shown.payload, multiline=True))
    print("\nenvelope:")
    print(visible(shown.envelope, multiline=True))
    return EXIT_OK


def cmd_action(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    """requeue, retry-now or cancel: each id that changed on stdout, each that did not
    on stderr with the reason (exit 1); ``--target``: every matching message."""
    action = ACTIONS[args.command]
    if bool(args.msg_ids) == (args.target is not None):
        raise UsageError(f"{action.name}: give message ids or --target, not both or neither")
    if args.target is not None:
        changed = action.apply_to_target(repo, args.target, now_ms)
        for msg_id in changed:
            print(visible(f"{msg_id} {action.done}"))
        if not changed:
            line = f"{action.name}: no {action.wanted} messages to {args.target}"
            print(f"pigeon: {visible(line)}", file=sys.stderr)
        return EXIT_OK
    status = EXIT_OK
    for msg_id in args.msg_ids:
        seen = repo.get(msg_id)
        outcome = (
            ActionOutcome.UNKNOWN
            if seen is None
            else action.apply_one(repo, msg_id, now_ms, seen.updated_at)
        )
        line = visible(outcome_line(action, msg_id, outcome, None if seen is None else seen.state))
        if outcome is ActionOutcome.CHANGED:
            print(line)
        else:
            status = EXIT_NOT_CHANGED
            print(f"pigeon: {line}", file=sys.stderr)
    return status


def cmd_stats(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    # by name: SQLite groups in that order, PostgreSQL in any (--json is the same on both)
    direct = dict(sorted(repo.count_by_state().items()))
    channel = dict(sorted(repo.count_channel_by_state().items()))
    targets = queued_per_target(repo, now_ms)
    if args.json:
        print_json(
            {
                "direct": direct,
                "channel": channel,
                "queued_per_target": [
                    {
                        "target": t.target,
                        "queued": t.queued,
                        "oldest_age": max(now_ms - t.oldest_created_at, 0) // 1000,
                        "oldest_created_at": t.oldest_created_at,
                        "next_retry_at": t.next_retry_at,
                    }
                    for t in targets
                ],
            }
        )
        return EXIT_OK
    for title, counts in ((DELIVERIES_TITLE, direct), (CHANNEL_TITLE, channel)):
        print(f"{title}:")
        for state, n in state_counts(counts, zeros=False):
            print(f"  {visible(state).ljust(12)} {n}")
        if not counts:
            print("  (none)")
    print("queued per target:")
    if targets:
        print_table(QUEUE_COLUMNS, [queue_cells(t, now_ms) for t in targets], indent="  ")
    else:
        print("  (none)")
    return EXIT_OK


def cmd_owed(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    """Outstanding obligations (all, or those of ``--session`` as debtor or creditor)."""
    if args.session is None:
        obligations = repo.outstanding_obligations()
    else:
        listed = repo.owed(args.session)
        obligations = sorted(listed.owes + listed.owed, key=lambda o: o.created_at)
    if args.json:
        print_json([o.view() for o in obligations])
        return EXIT_OK
    print_table(OWED_COLUMNS, [owed_cells(o, now_ms) for o in obligations])
    return EXIT_OK


def cmd_inbox(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    if args.limit is not None and not 1 <= args.limit <= 1000:
        raise UsageError("--limit must be between 1 and 1000")
    query: dict[str, str] = {"session": args.session}
    if args.since is not None:
        query["since"] = args.since
    if args.limit is not None:
        query["limit"] = str(args.limit)
    answer = ask_daemon(args, env, "inbox", ("GET", "/swarm/inbox?" + urlencode(query), None))
    if isinstance(answer, int):
        return answer
    if args.json:
        print_json(answer)
        return EXIT_OK
    messages = answer.get("messages") or []
    print_table(
        ("msg_id", "from", "kind", "priority", "handed_off", "payload"),
        [
            [
                str(m.get("msg_id")), str(m.get("from")), str(m.get("kind")),
                str(m.get("priority")), format_time(m.get("handed_off_at")),
                cut(one_line(str(m.get("payload", ""))), ERROR_WIDTH),
            ]
            for m in messages
            if isinstance(m, dict)
        ],
    )  # fmt: skip
    more = " (more: run again with --since)" if answer.get("has_more") else ""
    print(f"next_cursor: {visible(str(answer.get('next_cursor')))}{more}", file=sys.stderr)
    return EXIT_OK


def cmd_install_plugin(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    try:
        return install_plugin.run(args.project, env, args.opencode_version)
    except install_plugin.InstallError as e:
        raise UsageError(str(e)) from e


def cmd_install_claude(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    try:
        return install_claude.run(args.project, args.uninstall, env)
    except install_plugin.InstallError as e:
        raise UsageError(str(e)) from e


def cmd_install_codex(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    try:
        return install_codex.run(args.as_name, args.uninstall, env)
    except install_codex.InstallError as e:
        raise UsageError(str(e)) from e


# -- dispatch ----------------------------------------------------------------------


DB_COMMANDS: dict[str, Callable[[SwarmRepository, argparse.Namespace, int], int]] = {
    "ls": cmd_ls,
    "show": cmd_show,
    **dict.fromkeys(ACTIONS, cmd_action),
    "stats": cmd_stats,
    "prune": cmd_prune,
    "owed": cmd_owed,
    "names": cmd_names,
    "channels": cmd_channels,
    "routes": cmd_routes,
    "permissions": cmd_permissions,
    "channel": cmd_channel,
    "search": cmd_search,
    "policy": cmd_policy,
    "threads": cmd_threads,
    "held": cmd_held,
    "release": cmd_release,
    "drop": cmd_drop,
}


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    now_ms: int | None = None,
    *,
    system_db: str = SYSTEM_DB,
    system_socket: str = SYSTEM_SOCKET,
) -> int:
    """Run one ``pigeon`` command; its exit code.  ``system_db`` and ``system_socket``
    are the system service's, found when the user names no other (a test's elsewhere)."""
    env = os.environ if env is None else env
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["send"]:
        return pigeon_send.main(args_list[1:], env, system_socket=system_socket)
    try:
        args = build_parser().parse_args(args_list)
    except SystemExit as e:
        return EXIT_USAGE if e.code else EXIT_OK
    args.system_socket = system_socket
    db = ""  # the database once chosen: an error line never shows its URL's password
    try:
        if args.command == "inbox":
            return cmd_inbox(args, env)
        if args.command == "install-plugin":
            return cmd_install_plugin(args, env)
        if args.command == "install-claude":
            return cmd_install_claude(args, env)
        if args.command == "install-codex":
            return cmd_install_codex(args, env)
        if args.command == "name":
            return cmd_name(args, env)
        if args.command == "permission":
            return cmd_permission(args, env)
        if args.command == "channel" and args.verb in DAEMON_VERBS:
            return cmd_membership(args, env)
        db = resolve_db(args.db, env, system_db=system_db, password_file=args.db_password_file)
        try:
            repo = SwarmRepository(open_existing(db))
        except StorageError as e:  # missing, foreign, another schema; PostgreSQL out of reach
            print(f"pigeon: {visible(without_password(str(e), db))}", file=sys.stderr)
            return EXIT_USAGE
        try:
            now = int(time.time() * 1000) if now_ms is None else now_ms
            return DB_COMMANDS[args.command](repo, args, now)
        finally:
            repo.close()
    except (UsageError, NoDatabase) as e:
        print(f"pigeon: {visible(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except StorageError as e:
        print(f"pigeon: {visible(without_password(str(e), db))}", file=sys.stderr)
        return EXIT_NOT_CHANGED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # an operator tool prints one line, never a traceback
        text = without_password(f"{type(e).__name__}: {e}", db)
        print(f"pigeon: unexpected error: {visible(text)}", file=sys.stderr)
        return EXIT_NOT_CHANGED


def entry() -> None:
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
