"""The swarm tools' arguments: their JSON schemas and their checks, ported from the
opencode plugin (checkArgs, stringArg, oneOf, parse*Args) with its wording.

An MCP client may send anything: every argument is checked here, and a wrong one is a
:class:`~pigeond.agents.daemon_link.ToolError` naming it.  ``null`` means "not given",
as in the plugin.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pigeond.agents.daemon_link import ToolError
from pigeond.agents.escaping import field
from pigeond.agents.rendering import DEFAULT_READ_LIMIT, MAX_READ_LIMIT
from pigeond.consent import ALLOW_ENTRY_RE, MAX_ALLOW, POLICIES
from pigeond.model import (
    CHANNEL_RE,
    KINDS,
    MSG_ID_RE,
    NAME_RE,
    PRIORITIES,
    SENDER_RE,
    STEER_PRIORITY,
    THREAD_RE,
)

MAX_REPLY_WITHIN_S: Final = 30 * 24 * 3600
MAX_SEARCH_LIMIT: Final = 50
CHANNEL_ACTIONS: Final = ("join", "leave", "list", "history")
CHANNEL_HINT: Final = "a channel name like team.backend"
NAME_HINT: Final = (
    "lower-case letters, digits, '.', '_' or '-', starting with a letter or digit, at most 64"
)
# swarm_send's to: a session id of any runtime, or @name
TARGET_RE: Final = re.compile(
    r"^(ses_[A-Za-z0-9_-]{1,128}"
    r"|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|mcp_[a-z0-9][a-z0-9_.-]{0,63}"
    r"|@[a-z0-9][a-z0-9_.-]{0,63})$"
)
CURSOR_RE: Final = re.compile(r"^(cur_[0-9]{1,18}|msg_[A-Za-z0-9_-]{1,128})$")
HISTORY_CURSOR_RE: Final = re.compile(r"^cur_[0-9]{1,18}$")

Args = Mapping[str, Any]


def shown(value: object) -> str:
    """A wrong value, quoted as JSON, escaped as every field is, and cut."""
    return field(json.dumps(value, ensure_ascii=False, default=str), 200)


def check_args(tool: str, args: object, allowed: tuple[str, ...]) -> Args:
    if not isinstance(args, Mapping):
        raise ToolError(f"{tool}: the arguments must be a JSON object")
    for key in args:
        if key not in allowed:
            raise ToolError(
                f"{tool}: unknown argument '{field(key, 100)}' (it takes {', '.join(allowed)})"
            )
    return args


def present(args: Args, key: str) -> bool:
    return args.get(key) is not None


# A lone surrogate: text no UTF-8 encodes, so no request to pigeond can carry it.
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def string_arg(
    tool: str, args: Args, key: str, pattern: re.Pattern[str] | None = None, hint: str = ""
) -> str | None:
    if not present(args, key):
        return None
    value = args[key]
    if not isinstance(value, str):
        raise ToolError(f"{tool}: '{key}' must be a string, not {shown(value)}")
    lone = _SURROGATE.search(value)
    if lone is not None:
        raise ToolError(
            f"{tool}: '{key}' is not valid Unicode text (a lone surrogate,"
            f" U+{ord(lone.group()):04X})"
        )
    if pattern is not None and not pattern.fullmatch(value):
        raise ToolError(f"{tool}: '{key}' must be {hint}, not {shown(value)}")
    return value


def one_of(tool: str, args: Args, key: str, choices: tuple[str, ...]) -> str | None:
    if not present(args, key):
        return None
    value = args[key]
    if value not in choices:
        raise ToolError(f"{tool}: '{key}' must be one of {', '.join(choices)}, not {shown(value)}")
    return str(value)


def boolean_arg(tool: str, args: Args, key: str) -> bool | None:
    if not present(args, key):
        return None
    if not isinstance(args[key], bool):
        raise ToolError(f"{tool}: '{key}' must be true or false, not {shown(args[key])}")
    return bool(args[key])


def integer_arg(tool: str, args: Args, key: str, low: int, high: int, what: str) -> int | None:
    if not present(args, key):
        return None
    value = args[key]
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or not low <= value <= high:
        raise ToolError(f"{tool}: '{key}' must be {what} from {low} to {high}, not {shown(value)}")
    return int(value)


@dataclass(frozen=True, slots=True)
class SendArgs:
    to: str | None
    channel: str | None
    payload: str
    kind: str | None
    priority: str | None
    reply_to: str | None
    expects_reply: bool | None
    reply_within_s: int | None
    sender: str | None  # 'from': only where pigeon-mcp knows no identity
    thread: str | None = None  # None: pigeond takes reply_to's, else starts one
    steer: bool | None = None  # urgent only: into the target's running turn, if it allows

    def body(self) -> dict[str, Any]:
        """The fields of POST /swarm/send that were given."""
        fields = {
            "to": self.to,
            "channel": self.channel,
            "payload": self.payload,
            "kind": self.kind,
            "priority": self.priority,
            "steer": self.steer,
            "reply_to": self.reply_to,
            "expects_reply": self.expects_reply,
            "reply_within_s": self.reply_within_s,
            "thread": self.thread,
        }
        return {k: v for k, v in fields.items() if v is not None}


SEND_ARGS: Final = (
    "to", "channel", "payload", "kind", "priority", "steer", "reply_to", "thread",
    "expects_reply", "reply_within_s", "from",
)  # fmt: skip


def parse_send(raw: object) -> SendArgs:
    tool = "swarm_send"
    args = check_args(tool, raw, SEND_ARGS)
    to = string_arg(tool, args, "to", TARGET_RE, "a session id like ses_... or @name")
    channel = string_arg(tool, args, "channel", CHANNEL_RE, CHANNEL_HINT)
    if (to is None) == (channel is None):
        raise ToolError(f"{tool}: give exactly one of 'to' (a session id) or 'channel'")
    payload = string_arg(tool, args, "payload")
    if payload is None or payload.strip() == "":
        raise ToolError(f"{tool}: 'payload' (the message text) is required and must not be empty")
    priority = one_of(tool, args, "priority", PRIORITIES)
    steer = boolean_arg(tool, args, "steer")
    if steer and priority != STEER_PRIORITY:
        raise ToolError(f"{tool}: 'steer' goes with priority '{STEER_PRIORITY}'")
    return SendArgs(
        to=to,
        channel=channel,
        payload=payload,
        kind=one_of(tool, args, "kind", KINDS),
        priority=priority,
        steer=steer,
        reply_to=string_arg(tool, args, "reply_to", MSG_ID_RE, "a msg_id like msg_..."),
        expects_reply=boolean_arg(tool, args, "expects_reply"),
        reply_within_s=integer_arg(
            tool, args, "reply_within_s", 1, MAX_REPLY_WITHIN_S, "a whole number of seconds"
        ),
        sender=string_arg(
            tool, args, "from", SENDER_RE, "who is sending (letters, digits, '.', '_', '-')"
        ),
        thread=string_arg(tool, args, "thread", THREAD_RE, "a thread id like thr_..."),
    )


def parse_read(raw: object) -> tuple[str | None, int]:
    tool = "swarm_read"
    args = check_args(tool, raw, ("since", "limit"))
    since = string_arg(
        tool, args, "since", CURSOR_RE, "a cursor from swarm_read (cur_N) or a msg_id"
    )
    limit = integer_arg(tool, args, "limit", 1, MAX_READ_LIMIT, "an integer")
    return since, DEFAULT_READ_LIMIT if limit is None else limit


def parse_name(raw: object) -> str:
    tool = "swarm_name"
    args = check_args(tool, raw, ("name",))
    name = string_arg(tool, args, "name", NAME_RE, NAME_HINT)
    if name is None:
        raise ToolError(f"{tool}: 'name' is required ({NAME_HINT})")
    return name


def parse_status(raw: object) -> str:
    tool = "swarm_status"
    args = check_args(tool, raw, ("msg_id",))
    msg_id = string_arg(tool, args, "msg_id", MSG_ID_RE, "a msg_id like msg_...")
    if msg_id is None:
        raise ToolError(f"{tool}: 'msg_id' is required")
    return msg_id


@dataclass(frozen=True, slots=True)
class PolicyArgs:
    policy: str | None
    allow: list[str] | None
    release: bool
    steer: bool | None = None  # None: as it is


def parse_policy(raw: object) -> PolicyArgs:
    tool = "swarm_policy"
    args = check_args(tool, raw, ("policy", "allow", "release", "steer"))
    policy = one_of(tool, args, "policy", POLICIES)
    allow = None
    if present(args, "allow"):
        value = args["allow"]
        if (
            not isinstance(value, list)
            or len(value) > MAX_ALLOW
            or not all(isinstance(v, str) and ALLOW_ENTRY_RE.fullmatch(v) for v in value)
        ):
            raise ToolError(
                f"{tool}: 'allow' must be a list of at most {MAX_ALLOW} session ids (ses_...),"
                f" not {shown(value)}"
            )
        allow = list(value)
    release = boolean_arg(tool, args, "release") is True
    steer = boolean_arg(tool, args, "steer")
    for name, given in (("allow", allow), ("steer", steer)):
        if given is not None and policy is None:
            raise ToolError(f"{tool}: '{name}' goes with 'policy' ({', '.join(POLICIES)})")
    return PolicyArgs(policy, allow, release, steer)


def parse_channel(raw: object) -> tuple[str, str | None, str | None]:
    tool = "swarm_channel"
    args = check_args(tool, raw, ("action", "channel", "since"))
    action = one_of(tool, args, "action", CHANNEL_ACTIONS)
    if action is None:
        raise ToolError(f"{tool}: 'action' is required ({', '.join(CHANNEL_ACTIONS)})")
    channel = string_arg(tool, args, "channel", CHANNEL_RE, CHANNEL_HINT)
    if channel is None and action != "list":
        raise ToolError(f"{tool}: action \"{action}\" needs 'channel' ({CHANNEL_HINT})")
    since = string_arg(
        tool, args, "since", HISTORY_CURSOR_RE, "the cursor the last history ended with (cur_N)"
    )
    if since is not None and action != "history":
        raise ToolError(f"{tool}: 'since' goes with action \"history\"")
    return action, channel, since


def parse_owed(raw: object) -> None:
    check_args("swarm_owed", raw, ())


def parse_search(raw: object) -> tuple[str, int]:
    tool = "swarm_search"
    args = check_args(tool, raw, ("query", "limit"))
    query = string_arg(tool, args, "query")
    if query is None or query.strip() == "":
        raise ToolError(f"{tool}: 'query' (the words to look for) is required")
    limit = integer_arg(tool, args, "limit", 1, MAX_SEARCH_LIMIT, "an integer")
    return query, DEFAULT_READ_LIMIT if limit is None else limit
