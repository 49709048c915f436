"""``pigeon``'s command line: every subcommand, its options and their help.

Declarative only (``pigeon.py`` runs the commands): the actions' names and help
come from :mod:`pigeond.cli.actions`, the states from :mod:`pigeond.cli.presentation`.
"""

from __future__ import annotations

import argparse

from pigeond.cli.actions import ACTIONS
from pigeond.cli.daemon_call import add_daemon_options
from pigeond.cli.opencode_version import MAJORS
from pigeond.cli.pigeon_channels import add_channels_parsers
from pigeond.cli.pigeon_held import add_held_parsers
from pigeond.cli.pigeon_names import add_names_parsers
from pigeond.cli.pigeon_permissions import add_permissions_parsers
from pigeond.cli.pigeon_policy import add_policy_parser
from pigeond.cli.pigeon_routes import add_routes_parser
from pigeond.cli.pigeon_search import add_search_parser
from pigeond.cli.presentation import STATES
from pigeond.config import SYSTEM_DB, Config

# pigeon does not read pigeond's configuration: prune defaults to its default retention
DEFAULT_RETENTION_DAYS = Config().retention_days


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pigeon",
        description="Look at and steer pigeond's message queue.",
        epilog="'pigeon send ...' is exactly pigeon-send (see pigeon send --help).",
    )
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument(
        "--db",
        metavar="PATH|URL",
        help=f"a database file or a postgresql:// URL (default $PIGEOND_DB, else {SYSTEM_DB}"
        " when readable, else the per-user pigeond.db); never with its password",
    )
    db.add_argument(
        "--db-password-file",
        metavar="FILE",
        help="the PostgreSQL password's file (first line, mode 0600; default"
        " $PIGEOND_DB_PASSWORD_FILE; libpq's ~/.pgpass works too)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    ls = sub.add_parser("ls", parents=[db], help="list messages, newest first")
    ls.add_argument("--state", help=f"only this state ({', '.join(STATES)})")
    ls.add_argument("--target", metavar="T", help="only to this session or channel")
    ls.add_argument("--from", dest="sender", metavar="F", help="only from this sender")
    ls.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (default 50)")
    ls.add_argument("--json", action="store_true", help="a JSON list of objects")

    show = sub.add_parser("show", parents=[db], help="every column of one message")
    show.add_argument("msg_id", metavar="MSG_ID")
    show.add_argument("--json", action="store_true", help="one JSON object")

    for action in ACTIONS.values():
        text = action.summary
        one = sub.add_parser(action.name, parents=[db], help=text, description=text)
        one.add_argument("msg_ids", nargs="*", metavar="MSG_ID")
        one.add_argument("--target", metavar="T", help="every matching message to T")

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

    owed = sub.add_parser(
        "owed", parents=[db], help="who owes whom a reply: outstanding obligations, oldest first"
    )
    owed.add_argument("--session", metavar="S", help="only what S owes or is owed")
    owed.add_argument("--json", action="store_true", help="a JSON list of objects")

    add_search_parser(sub, db)
    add_policy_parser(sub, db)
    add_held_parsers(sub, db)

    add_names_parsers(sub, db)
    add_channels_parsers(sub, db)
    add_routes_parser(sub, db)
    add_permissions_parsers(sub, db)

    inbox = sub.add_parser("inbox", help="what was handed off to a session (via the daemon)")
    inbox.add_argument("--session", required=True, metavar="S")
    inbox.add_argument("--since", metavar="C", help="cursor (next_cursor) or msg_id")
    inbox.add_argument("--limit", type=int, metavar="N", help="page size, 1-1000 (default 100)")
    add_daemon_options(inbox)
    inbox.add_argument("--json", action="store_true", help="the daemon's JSON answer")

    plugin = sub.add_parser(
        "install-plugin",
        help="put the opencode plugin (swarm_send, swarm_read, swarm_status, ...) in place",
        description="Copy pigeond's opencode plugin where opencode loads it: the user's global"
        " opencode config (the default) or one project's .opencode folder.  The plugin is"
        " the one for the opencode on PATH (opencode --version: 1.x, or 2.x into plugins/).",
    )
    add_scope_options(
        plugin,
        "--global",
        "$XDG_CONFIG_HOME/opencode/plugin (default ~/.config/opencode/plugin): every session",
        "DIR/.opencode/plugin: sessions in DIR and below",
    )
    plugin.add_argument(
        "--opencode-version",
        type=int,
        choices=MAJORS,
        metavar="{1,2}",
        help="install the plugin for this opencode major version instead of asking opencode",
    )

    claude = sub.add_parser(
        "install-claude",
        help="register pigeond with Claude Code: the pigeon MCP server, its hooks, its skill",
        description="Merge pigeond's MCP server (pigeon-mcp), hooks (pigeon-hook) and skill"
        " (swarm-messaging) into Claude Code's settings for the user (the default) or one"
        " project, keeping everything else in them as it is.",
    )
    add_scope_options(
        claude,
        "--user",
        "~/.claude.json (mcpServers), ~/.claude/settings.json (hooks), ~/.claude/skills"
        " ($CLAUDE_CONFIG_DIR for ~/.claude when set): every session",
        "DIR/.mcp.json, DIR/.claude/settings.local.json, DIR/.claude/skills: sessions"
        " started in DIR",
    )
    claude.add_argument(
        "--uninstall", action="store_true", help="remove exactly what install-claude added"
    )

    codex = sub.add_parser(
        "install-codex",
        help="register pigeon-mcp (the swarm tools) with Codex in $CODEX_HOME/config.toml",
        description="Add [mcp_servers.pigeon] to Codex's config.toml ($CODEX_HOME, default"
        " ~/.codex), keeping everything else in it as it is.",
    )
    codex.add_argument(
        "--as",
        dest="as_name",
        metavar="NAME",
        help="the name the Codex session goes by (pigeon-mcp --as @NAME, the member mcp_NAME):"
        " needed to read its inbox; without it, sending needs 'from'",
    )
    codex.add_argument("--uninstall", action="store_true", help="remove [mcp_servers.pigeon]")

    sub.add_parser("send", help="send a message: exactly pigeon-send", add_help=False)
    return parser


def add_scope_options(
    parser: argparse.ArgumentParser, everywhere: str, everywhere_help: str, project_help: str
) -> None:
    """An install's scope: ``everywhere`` (the default: ``project`` None) or ``--project
    DIR``, one or the other."""
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        everywhere, dest="project", action="store_const", const=None, help=everywhere_help
    )
    scope.add_argument("--project", metavar="DIR", help=project_help)
