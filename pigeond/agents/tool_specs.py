"""What an MCP client is told about each swarm tool: its description and its JSON schema.
The descriptions are the opencode plugin's, where pigeon-mcp behaves the same."""

from __future__ import annotations

from typing import Any, Final

from pigeond.agents.escaping import QUOTE
from pigeond.agents.rendering import DEFAULT_READ_LIMIT, MAX_OUTPUT_BYTES, MAX_READ_LIMIT
from pigeond.agents.tool_args import CHANNEL_ACTIONS, MAX_SEARCH_LIMIT
from pigeond.agents.tool_names import TOOL_NAMES
from pigeond.consent import POLICIES
from pigeond.model import KINDS, PRIORITIES


def _optional(kind: str, description: str, choices: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": [kind, "null"], "description": description}
    if choices:
        schema["enum"] = [*choices, None]
    return schema


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def _words(text: str) -> str:
    return " ".join(text.split())


SPECS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "swarm_send": (
        _words(f"""
        Send a message to another agent's session (to: its session id, or "@name" for the
        session that claimed that name with swarm_name) or to a channel (every member but you
        gets its own copy; see swarm_channel), through the pigeond daemon.  It is queued on
        disk at once and reaches the target's transcript when that session is free, wrapped
        in <swarm_message from="your session id" ...>.  Returns the msg_id and its state (for
        a channel: how many members got it, and who did not, and why); follow it with
        swarm_status.  kind is one of {", ".join(KINDS)}."""),
        _object(
            {
                "to": _optional("string", "the target session id or @name; null for a channel"),
                "channel": _optional("string", "a channel name; null when sending to a session"),
                "payload": {"type": "string", "description": "the message text"},
                "kind": _optional("string", "what the message is; null for chat", KINDS),
                "priority": _optional(
                    "string", "urgent, normal or low; null for normal", PRIORITIES
                ),
                "steer": _optional(
                    "boolean",
                    "urgent only: true asks that it go into the target's running turn, read at"
                    " its next step (opencode 2.x, when the target's policy allows it), not"
                    " after it; null: after it",
                ),
                "reply_to": _optional("string", "the msg_id this message answers; null if none"),
                "thread": _optional(
                    "string",
                    "the thread it belongs to (thr_...); null: the thread of reply_to, else a"
                    " new one",
                ),
                "expects_reply": _optional(
                    "boolean",
                    "whether the target owes you a reply; null: yes for task.assign and"
                    " clarification.request, else no",
                ),
                "reply_within_s": _optional(
                    "integer",
                    "seconds the target has to reply once it has the message; null for"
                    " pigeond's default (an hour)",
                ),
                "from": _optional(
                    "string",
                    "who is sending: only when pigeon-mcp knows no session of yours (outside"
                    " Claude Code, without --as); null otherwise",
                ),
            },
            ("payload",),
        ),
    ),
    "swarm_read": (
        _words(f"""
        Read the swarm messages handed to this session (its inbox), oldest first, at most
        {MAX_OUTPUT_BYTES} bytes.  Pass since (the cursor the previous read ended with) to get
        only newer ones; limit is how many (default {DEFAULT_READ_LIMIT}, at most
        {MAX_READ_LIMIT}).  Each message is a line "--- msg_id · from session · kind ·
        priority · time" and then its payload, every payload line starting with "{QUOTE}" (&
        < > shown as &amp; &lt; &gt;, control characters as \\xNN): a line without "{QUOTE}"
        is never a sender's text.  First come the replies this session owes ("you owe a reply
        to msg_... from ...") and is owed.  For a pigeon-mcp --as member, what is due to it
        is handed over first, in its <swarm_message> envelopes."""),
        _object(
            {
                "since": _optional(
                    "string", "the cursor the last swarm_read ended with (cur_N) or a msg_id"
                ),
                "limit": _optional(
                    "integer", f"how many messages, 1 to {MAX_READ_LIMIT}; null for 10"
                ),
            }
        ),
    ),
    "swarm_status": (
        _words("""
        Where a swarm message is: queued, handed_off (given to the target session), failed,
        expired or cancelled, with attempts, times and the last error; for a hand-off, when
        it was seen in the target's transcript, when the target's turn answered it, and
        whether that turn waits for a person to answer a permission request.  For a
        message sent to a channel (fanned_out): each member's copy, its state and receipt,
        and who did not get it."""),
        _object(
            {"msg_id": {"type": "string", "description": "the msg_id swarm_send returned"}},
            ("msg_id",),
        ),
    ),
    "swarm_name": (
        _words("""
        Claim a name for this session (like reviewer or builder-2), so other agents can send
        to you with swarm_send to "@name" instead of your session id.  A session has one
        name: claiming another gives the first up.  A name another live session holds is
        refused."""),
        _object(
            {"name": {"type": "string", "description": "lower-case letters, digits, . _ -"}},
            ("name",),
        ),
    ),
    "swarm_channel": (
        _words(f"""
        Channels: named groups of sessions.  A message sent with swarm_send to a channel
        reaches every member but the sender, each as its own copy.  action "join" or "leave":
        this session joins or leaves channel (only this session).  "list": without channel,
        the channels this session is in; with it, that channel's members.  "history": what
        was sent to channel, oldest first; pass since (the cursor the last history ended
        with) for newer ones only.  History payloads are quoted as swarm_read quotes them:
        every line starts with "{QUOTE}"."""),
        _object(
            {
                "action": {"type": "string", "enum": list(CHANNEL_ACTIONS)},
                "channel": _optional("string", "the channel (like team.backend); null for list"),
                "since": _optional("string", "history only: the cursor (cur_N); null: oldest"),
            },
            ("action",),
        ),
    ),
    "swarm_policy": (
        _words("""
        Decide which swarm messages reach this session (your consent).  policy "accept" (the
        default) lets every message in; "hold" keeps them stored and waiting until you
        release them or switch back to "accept"; "refuse" makes senders' swarm_send fail at
        once.  allow lists senders (session ids or @names) that always get through.
        release: true lets the held messages in now.  steer: true lets an urgent message whose
        sender asks for it go into your running turn (read at its next step) rather than
        after it; off unless you turn it on.  With no arguments it says your policy and how
        many messages wait."""),
        _object(
            {
                "policy": _optional("string", "null to leave it as it is", POLICIES),
                "allow": {
                    "type": ["array", "null"],
                    "items": {"type": "string"},
                    "description": "senders that always get through (replaces the list)",
                },
                "release": _optional("boolean", "true: let the held messages in now"),
                "steer": _optional(
                    "boolean", "allow urgent messages to steer your running turn; null: as it is"
                ),
            }
        ),
    ),
    "swarm_owed": (
        _words("""
        The replies this session owes ("you owe a reply to msg_... from ...") and is owed,
        with their kinds, states and due times: answer one with swarm_send and reply_to set
        to its msg_id."""),
        _object({}),
    ),
    "swarm_search": (
        _words(f"""
        Find the messages this session sent or received that contain the words of query
        (word for word, newest first; limit 1 to {MAX_SEARCH_LIMIT}, default
        {DEFAULT_READ_LIMIT}).  Shown as swarm_read shows messages: every payload line starts
        with "{QUOTE}"."""),
        _object(
            {
                "query": {"type": "string", "description": "the words to look for"},
                "limit": _optional("integer", f"how many, 1 to {MAX_SEARCH_LIMIT}"),
            },
            ("query",),
        ),
    ),
}

assert tuple(SPECS) == TOOL_NAMES  # one declaration of the names (tool_names.py)
