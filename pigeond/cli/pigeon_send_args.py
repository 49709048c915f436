"""``pigeon-send``'s command line: its forms, options and their help (declarative only;
``pigeon_send`` runs it)."""

from __future__ import annotations

import argparse
from typing import Final

from pigeond.cli.daemon_http import URL_HELP
from pigeond.model import KINDS, PRIORITIES, RECEIPT_MEANINGS, RECEIPT_STAGES

DEFAULT_TIMEOUT_S = 10.0
# as the opencode plugin's swarm_send (PIGEOND_SEND_RETRY_S)
DEFAULT_RETRY_FOR_S = 30.0
MAX_RETRY_FOR_S = 3600.0
DEFAULT_WAIT_S = 300.0
# What --wait can wait for: a stage of the receipt chain past "accepted" (the 202 is that).
UNTIL_STAGES = RECEIPT_STAGES[1:]
DEFAULT_UNTIL = "handed_off"
UNTIL_HELP = "; ".join(f"{stage}: {RECEIPT_MEANINGS[stage]}" for stage in UNTIL_STAGES)
# The command lines pigeon-send takes: its usage line (a test runs each).
FORMS: Final = ("TO PAYLOAD", "--channel NAME PAYLOAD")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pigeon-send",
        usage="\n       ".join(f"%(prog)s [OPTION ...] {form}" for form in FORMS),
        description="Send a swarm message through pigeond.",
    )
    parser.add_argument(
        "--from", dest="sender", metavar="ID", help="sender id (default $OPENCODE_SESSION_ID)"
    )
    parser.add_argument("--kind", choices=KINDS, help="message kind (default chat)")
    parser.add_argument("--priority", choices=PRIORITIES, help="priority (default normal)")
    parser.add_argument(
        "--steer", action="store_const", const=True,
        help="with --priority urgent: ask that it go into the target's running turn (opencode"
        " 2.x, if the target's policy allows it); otherwise it goes after that turn",
    )  # fmt: skip
    parser.add_argument("--reply-to", metavar="MSG", help="msg_id this message answers")
    parser.add_argument(
        "--thread", metavar="T",
        help="the thread it belongs to (default: --reply-to's, else a new one)",
    )  # fmt: skip
    parser.add_argument(
        "--msg-id", metavar="ID",
        help="idempotency key: the daemon takes a msg_id it already has, with the same content,"
        " as the same message (default: pigeon-send makes one, the same for every retry)",
    )  # fmt: skip
    parser.add_argument(
        "--ttl", type=int, metavar="S",
        help="seconds the message may wait before it expires (default: the daemon's, 24 h)",
    )  # fmt: skip
    parser.add_argument(
        "--expects-reply", action=argparse.BooleanOptionalAction, default=None,
        help="the target owes a reply (default: yes for task.assign and clarification.request)",
    )  # fmt: skip
    parser.add_argument(
        "--reply-within", type=int, metavar="S",
        help="seconds the target has to reply, from the hand-off (default: the daemon's, 1 h);"
        " implies --expects-reply",
    )  # fmt: skip
    parser.add_argument("--url", help=URL_HELP)
    parser.add_argument(
        "--retry-for", type=float, default=DEFAULT_RETRY_FOR_S, metavar="S",
        help="how long to keep trying, with the same msg_id, while the daemon is unreachable"
        " (connection refused or reset, no socket file) or answers 503 or 429 (too many"
        f" messages); 0: one try (default {DEFAULT_RETRY_FOR_S:g}, at most"
        f" {MAX_RETRY_FOR_S:g}). Other answers and a daemon that does not answer within"
        " --timeout are not retried",
    )  # fmt: skip
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help=f"seconds to wait for the daemon's answer (default {DEFAULT_TIMEOUT_S:g}); with"
        f" --wait, for the whole wait (default {DEFAULT_WAIT_S:g})",
    )
    parser.add_argument(
        "--wait", action="store_true",
        help="after acceptance, wait until the message reaches --until's stage (exit 0) or"
        " fails (exit 1)",
    )  # fmt: skip
    parser.add_argument(
        "--until", choices=UNTIL_STAGES, metavar="|".join(UNTIL_STAGES),
        help=f"with --wait, the stage to wait for (default {DEFAULT_UNTIL}): {UNTIL_HELP}",
    )  # fmt: skip
    parser.add_argument(
        "--channel", metavar="NAME",
        help="send to a channel instead of a session (then no TO): every member but the sender"
        " gets its own copy (see pigeon channel show NAME)",
    )  # fmt: skip
    parser.add_argument(
        "target", nargs="?", metavar="TO",
        help="the target session (ses_..., or @name: whoever holds the name)",
    )  # fmt: skip
    parser.add_argument("payload", metavar="PAYLOAD", help="the message ('-' reads stdin)")
    return parser
