"""``pigeon``: the operator's scriptable view of pigeond's queue.

It reads the database directly (WAL makes that safe while the daemon runs)
and changes messages only through conditional writes in the storage package;
``prune`` deletes done history older than a cutoff, as the daemon's pruner
does, and gives the freed pages back to the file system; ``inbox`` and
``send`` go through the daemon's HTTP API; ``install-plugin`` puts the
opencode plugin in place.  Text output shows every message field
through ``terminal.visible`` (control characters, escape sequences and bidi
overrides escaped); ``--json`` output is exact.  Exit codes: 0 every named message changed
(or the read, prune or install worked), 1 any did not, 2 usage or an unusable
database, 3 the daemon is unreachable (``inbox``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from pigeond.cli import install_plugin, pigeon_send
from pigeond.config import Config, default_db_path
from pigeond.credentials import TokenError, client_token, daemon_address
from pigeond.envelope import render_envelope
from pigeond.model import StoredMessage
from pigeond.storage import SchemaError, StorageError, SwarmRepository
from pigeond.storage.operator import ActionOutcome, open_existing
from pigeond.storage.retention import FileSize, cutoff_ms
from pigeond.terminal import json_visible, visible

SYSTEM_DB = "/var/lib/pigeond/pigeond.db"
EXIT_OK, EXIT_NOT_CHANGED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
LS_COLUMNS = ("msg_id", "state", "to", "from", "kind", "priority", "attempts", "age", "last_error")
ERROR_WIDTH = 40
# prune: rows per delete transaction and pages per vacuum step, each one short write
# so that a running daemon's own writes never wait long
PRUNE_BATCH_ROWS = 500
PRUNE_VACUUM_PAGES = 1000
# pigeon does not read pigeond's configuration: prune defaults to its default retention
DEFAULT_RETENTION_DAYS = Config().retention_days
TIME_COLUMNS = (
    "next_retry_at", "created_at", "updated_at", "handed_off_at", "verified_at", "verify_by",
    "expires_at",
)  # fmt: skip


class UsageError(ValueError):
    pass


def resolve_db(given: str | None, env: Mapping[str, str]) -> str:
    """--db, else $PIGEOND_DB, else the system database when readable, else the user's."""
    if given:
        return given
    if env.get("PIGEOND_DB"):
        return env["PIGEOND_DB"]
    if os.path.isfile(SYSTEM_DB) and os.access(SYSTEM_DB, os.R_OK):
        return SYSTEM_DB
    return default_db_path(env)


def format_age(ms: int) -> str:
    seconds = max(ms, 0) // 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def destination(message: StoredMessage) -> str:
    return message.to_session if message.to_session is not None else f"#{message.channel}"


def ls_row(message: StoredMessage, now_ms: int) -> dict[str, Any]:
    """One ``ls`` row; in JSON age is whole seconds and last_error is not truncated."""
    return {
        "msg_id": message.msg_id,
        "state": message.state,
        "to": destination(message),
        "from": message.from_session,
        "kind": message.kind,
        "priority": message.priority,
        "attempts": message.attempts,
        "age": max(now_ms - message.created_at, 0) // 1000,
        "last_error": message.last_error,
    }


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Aligned columns; every cell is escaped here, so callers pass raw values."""
    shown = [[visible(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in shown) for i in range(len(header))]
    for line in shown:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


def truncate(text: str | None, width: int) -> str:
    """``text`` on one line, cut so that its escaped form fits ``width`` (``…`` marks a cut).

    The cut falls between characters, never inside an escape such as ``\\x1b``.
    """
    if not text:
        return ""
    flat = " ".join(text.split())
    if len(visible(flat)) <= width:
        return flat
    kept: list[str] = []
    used = 0
    for char in flat:
        used += len(visible(char))
        if used > width - 1:
            break
        kept.append(char)
    return "".join(kept) + "…"


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
    rows = [ls_row(m, now_ms) for m in messages]
    if args.json:
        print_json(rows)
        return EXIT_OK
    table = [
        [
            *(str(row[c]) for c in LS_COLUMNS[:7]),
            format_age(now_ms - m.created_at),
            truncate(m.last_error, ERROR_WIDTH),
        ]
        for row, m in zip(rows, messages, strict=True)
    ]
    print_table(LS_COLUMNS, table)
    return EXIT_OK


def cmd_show(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    message = repo.get(args.msg_id)
    if message is None:
        print(f"pigeon: {visible(args.msg_id)}: unknown message", file=sys.stderr)
        return EXIT_NOT_CHANGED
    columns = dataclasses.asdict(message)
    envelope = render_envelope(message)
    if args.json:
        print_json({**columns, "envelope": envelope})
        return EXIT_OK
    width = max(len(name) for name in columns)
    for name, value in columns.items():
        if name == "payload":
            continue
        shown = str(value) if value is not None else "-"
        if name in TIME_COLUMNS:
            shown = format_time(value)
        print(f"{name.ljust(width)}  {visible(shown)}")
    print(f"{'age'.ljust(width)}  {format_age(now_ms - message.created_at)}")
    print("\npayload:")
    print(visible(message.payload, multiline=True))
    print("\nenvelope:")
    print(visible(envelope, multiline=True))
    return EXIT_OK


ONE_ACTIONS: dict[str, Callable[[SwarmRepository, str, int, int | None], ActionOutcome]] = {
    "requeue": SwarmRepository.requeue,
    "retry-now": SwarmRepository.retry_now,
    "cancel": SwarmRepository.cancel,
}
TARGET_ACTIONS: dict[str, Callable[[SwarmRepository, str, int], list[str]]] = {
    "requeue": SwarmRepository.requeue_target,
    "retry-now": SwarmRepository.retry_now_target,
    "cancel": SwarmRepository.cancel_target,
}
WANTED_STATE = {"requeue": "failed or expired", "retry-now": "queued", "cancel": "queued"}
DONE_WORD = {"requeue": "requeued", "retry-now": "due now", "cancel": "cancelled"}


def cmd_action(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    name: str = args.command
    if bool(args.msg_ids) == (args.target is not None):
        raise UsageError(f"{name}: give message ids or --target, not both or neither")
    if args.target is not None:
        changed = TARGET_ACTIONS[name](repo, args.target, now_ms)
        for msg_id in changed:
            print(f"{visible(msg_id)} {DONE_WORD[name]}")
        if not changed:
            print(
                f"pigeon: {name}: no {WANTED_STATE[name]} messages to {visible(args.target)}",
                file=sys.stderr,
            )
        return EXIT_OK
    status = EXIT_OK
    for msg_id in args.msg_ids:
        seen = repo.get(msg_id)
        if seen is None:
            outcome = ActionOutcome.UNKNOWN
        else:
            outcome = ONE_ACTIONS[name](repo, msg_id, now_ms, seen.updated_at)
        if outcome is ActionOutcome.CHANGED:
            print(f"{visible(msg_id)} {DONE_WORD[name]}")
            continue
        status = EXIT_NOT_CHANGED
        if outcome is ActionOutcome.WRONG_STATE and seen is not None:
            why = f"is {visible(seen.state)}, not {WANTED_STATE[name]}"
        elif outcome is ActionOutcome.STALE:
            why = "changed meanwhile; not touched (look again)"
        else:
            why = "unknown message"
        print(f"pigeon: {name}: {visible(msg_id)} {why}", file=sys.stderr)
    return status


def cmd_stats(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    direct = repo.count_by_state()
    channel = repo.count_channel_by_state()
    targets = repo.queued_per_target()
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
    for title, counts in (("direct messages", direct), ("channel messages", channel)):
        print(f"{title}:")
        for state, n in sorted(counts.items()):
            print(f"  {visible(state).ljust(12)} {n}")
        if not counts:
            print("  (none)")
    print("queued per target:")
    if targets:
        print_table(
            ("  target", "queued", "oldest"),
            [
                ["  " + t.target, str(t.queued), format_age(now_ms - t.oldest_created_at)]
                for t in targets
            ],
        )
    else:
        print("  (none)")
    return EXIT_OK


def cmd_prune(repo: SwarmRepository, args: argparse.Namespace, now_ms: int) -> int:
    days: float = args.older_than_days
    if not (math.isfinite(days) and days > 0):
        raise UsageError(
            "--older-than-days must be more than 0 (retention_days = 0 keeps everything)"
        )
    cutoff = cutoff_ms(now_ms, days)
    groups = repo.prunable(cutoff)
    before = repo.file_size()
    pruned = pages = 0
    if not args.dry_run:
        while (batch := sum(repo.prune_batch(cutoff, PRUNE_BATCH_ROWS).values())) > 0:
            pruned += batch
            if batch < PRUNE_BATCH_ROWS:
                break
        while (given := repo.give_back_pages(PRUNE_VACUUM_PAGES)) > 0:
            pages += given
            if given < PRUNE_VACUUM_PAGES:
                break
    after = repo.file_size()
    found = sum(g.count for g in groups)
    if args.json:
        print_json(
            {
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
        )
        return EXIT_OK
    print(f"done messages last changed before {format_time(cutoff)} (older than {days:g} days):")
    if groups:
        print_table(
            ("scope", "state", "count", "oldest", "newest"),
            [
                [g.scope, g.state, str(g.count), format_time(g.oldest_at), format_time(g.newest_at)]
                for g in groups
            ],
        )
    else:
        print("  (none)")
    if args.dry_run:
        print(f"would prune {found} messages (dry run: nothing changed); {_size(before)}")
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


def cmd_inbox(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    if args.limit is not None and not 1 <= args.limit <= 1000:
        raise UsageError("--limit must be between 1 and 1000")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    url = daemon_address(args.url, env).url
    try:
        token = client_token(env)
    except TokenError as e:
        raise UsageError(str(e)) from e
    query: dict[str, str] = {"session": args.session}
    if args.since is not None:
        query["since"] = args.since
    if args.limit is not None:
        query["limit"] = str(args.limit)
    try:
        answer = pigeon_send.call_daemon(
            url, "GET", "/swarm/inbox?" + urlencode(query), None, args.timeout, token
        )
    except pigeon_send.UsageError as e:
        raise UsageError(str(e)) from e
    except (OSError, TimeoutError) as e:
        print(f"pigeon: daemon at {visible(url)} unreachable: {visible(str(e))}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if answer.status != 200:
        error = str(answer.body.get("error", "")) or f"HTTP {answer.status}"
        print(f"pigeon: inbox: daemon answered {answer.status}: {visible(error)}", file=sys.stderr)
        return EXIT_NOT_CHANGED if 400 <= answer.status < 500 else EXIT_UNAVAILABLE
    if args.json:
        print_json(answer.body)
        return EXIT_OK
    messages = answer.body.get("messages") or []
    print_table(
        ("msg_id", "from", "kind", "priority", "handed_off", "payload"),
        [
            [
                str(m.get("msg_id")), str(m.get("from")), str(m.get("kind")),
                str(m.get("priority")), format_time(m.get("handed_off_at")),
                truncate(str(m.get("payload", "")), ERROR_WIDTH),
            ]
            for m in messages
            if isinstance(m, dict)
        ],
    )  # fmt: skip
    more = " (more: run again with --since)" if answer.body.get("has_more") else ""
    print(f"next_cursor: {visible(str(answer.body.get('next_cursor')))}{more}", file=sys.stderr)
    return EXIT_OK


def cmd_install_plugin(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    try:
        return install_plugin.run(args.project, env, pigeon_send.DEFAULT_URL)
    except install_plugin.InstallError as e:
        raise UsageError(str(e)) from e


# -- parsing and dispatch ----------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pigeon",
        description="Look at and steer pigeond's message queue.",
        epilog="'pigeon send ...' is exactly pigeon-send (see pigeon send --help).",
    )
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument(
        "--db",
        metavar="PATH",
        help=f"database (default $PIGEOND_DB, else {SYSTEM_DB} when readable,"
        " else the per-user pigeond.db)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    ls = sub.add_parser("ls", parents=[db], help="list messages, newest first")
    ls.add_argument("--state", help="only this state (queued, handed_off, failed, ...)")
    ls.add_argument("--target", metavar="T", help="only to this session or channel")
    ls.add_argument("--from", dest="sender", metavar="F", help="only from this sender")
    ls.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (default 50)")
    ls.add_argument("--json", action="store_true", help="a JSON list of objects")

    show = sub.add_parser("show", parents=[db], help="every column of one message")
    show.add_argument("msg_id", metavar="MSG_ID")
    show.add_argument("--json", action="store_true", help="one JSON object")

    helps = {
        "requeue": "failed or expired → queued, due now, attempts reset",
        "retry-now": "make queued messages due now",
        "cancel": "queued → cancelled (never delivered, no notice)",
    }
    for name, text in helps.items():
        action = sub.add_parser(name, parents=[db], help=text, description=text)
        action.add_argument("msg_ids", nargs="*", metavar="MSG_ID")
        action.add_argument("--target", metavar="T", help="every matching message to T")

    stats = sub.add_parser("stats", parents=[db], help="counts by state, queued per target")
    stats.add_argument("--json", action="store_true", help="one JSON object")

    prune_text = (
        "delete done messages (verified hand-offs, failed, expired, cancelled; channel"
        " messages) older than D days, then shrink the file: what pigeond does every minute"
    )
    prune = sub.add_parser("prune", parents=[db], help=prune_text, description=prune_text)
    prune.add_argument(
        "--older-than-days",
        type=float,
        default=DEFAULT_RETENTION_DAYS,
        metavar="D",
        help=f"by the time each became done (default {DEFAULT_RETENTION_DAYS:g},"
        " pigeond's default retention_days)",
    )
    prune.add_argument("--dry-run", action="store_true", help="only show what would go")
    prune.add_argument("--json", action="store_true", help="one JSON object")

    inbox = sub.add_parser("inbox", help="what was handed off to a session (via the daemon)")
    inbox.add_argument("--session", required=True, metavar="S")
    inbox.add_argument("--since", metavar="C", help="cursor (next_cursor) or msg_id")
    inbox.add_argument("--limit", type=int, metavar="N", help="page size, 1-1000 (default 100)")
    inbox.add_argument(
        "--url",
        help="daemon URL (default $PIGEOND_URL, else the user's socket"
        f" $XDG_RUNTIME_DIR/pigeond/pigeond.sock when there, else {pigeon_send.DEFAULT_URL})",
    )
    inbox.add_argument("--timeout", type=float, default=10.0, metavar="S")
    inbox.add_argument("--json", action="store_true", help="the daemon's JSON answer")

    plugin = sub.add_parser(
        "install-plugin",
        help="put the opencode plugin (swarm_send, swarm_read, swarm_status) in place",
        description="Copy pigeond's opencode plugin where opencode loads it: the user's global"
        " opencode config (the default) or one project's .opencode folder.",
    )
    where = plugin.add_mutually_exclusive_group()
    where.add_argument(
        "--global",
        dest="project",
        action="store_const",
        const=None,
        help="$XDG_CONFIG_HOME/opencode/plugin (default ~/.config/opencode/plugin): every session",
    )
    where.add_argument(
        "--project", metavar="DIR", help="DIR/.opencode/plugin: sessions in DIR and below"
    )

    sub.add_parser("send", help="send a message: exactly pigeon-send", add_help=False)
    return parser


DB_COMMANDS: dict[str, Callable[[SwarmRepository, argparse.Namespace, int], int]] = {
    "ls": cmd_ls,
    "show": cmd_show,
    "requeue": cmd_action,
    "retry-now": cmd_action,
    "cancel": cmd_action,
    "stats": cmd_stats,
    "prune": cmd_prune,
}


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    now_ms: int | None = None,
) -> int:
    env = os.environ if env is None else env
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["send"]:
        return pigeon_send.main(args_list[1:], env)
    try:
        args = build_parser().parse_args(args_list)
    except SystemExit as e:
        return EXIT_USAGE if e.code else EXIT_OK
    try:
        if args.command == "inbox":
            return cmd_inbox(args, env)
        if args.command == "install-plugin":
            return cmd_install_plugin(args, env)
        path = resolve_db(args.db, env)
        try:
            repo = SwarmRepository(open_existing(path))
        except SchemaError as e:
            print(f"pigeon: {visible(str(e))}", file=sys.stderr)
            return EXIT_USAGE
        try:
            now = int(time.time() * 1000) if now_ms is None else now_ms
            return DB_COMMANDS[args.command](repo, args, now)
        finally:
            repo.close()
    except UsageError as e:
        print(f"pigeon: {visible(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except StorageError as e:
        print(f"pigeon: {visible(str(e))}", file=sys.stderr)
        return EXIT_NOT_CHANGED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # an operator tool prints one line, never a traceback
        print(f"pigeon: unexpected error: {type(e).__name__}: {visible(str(e))}", file=sys.stderr)
        return EXIT_NOT_CHANGED


def entry() -> None:
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
