"""pigeond's opencode plugin, run in opencode's runtime (Bun) with a stubbed daemon.

The end-to-end tests in tests/e2e/test_plugin_e2e.py run it inside the real
opencode; these pin each rule of the tools one at a time.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from pigeond.model import KINDS, MSG_ID_RE, PRIORITIES
from tests.plugin_runner import SESSION, ToolRun, accepted, refused_connection, run_tool

pytestmark = pytest.mark.slow  # each runs the opencode binary (installed with npm once)

TARGET = "ses_targetBBBB"
MAX_OUTPUT_BYTES = 8192


def state_reply(state: str = "queued", **fields: Any) -> dict[str, Any]:
    return {"status": 200, "body": {"msg_id": "msg_x", "to": TARGET, "state": state, **fields}}


def inbox_message(n: int, payload: str, **fields: Any) -> dict[str, Any]:
    return {
        "msg_id": f"msg_m{n}",
        "from": "ses_senderCCCC",
        "to": SESSION,
        "channel": None,
        "kind": "chat",
        "priority": "normal",
        "reply_to": None,
        "payload": payload,
        "created_at": 1796215498693,
        "handed_off_at": 1796215498733,
        "verified_at": None,
    } | fields


def inbox_reply(messages: list[dict[str, Any]], has_more: bool = False) -> dict[str, Any]:
    cursor = f"cur_{len(messages)}" if messages else None
    body = {"messages": messages, "has_more": has_more, "next_cursor": cursor}
    return {"status": 200, "body": body}


def send(args: dict[str, Any], **kwargs: Any) -> ToolRun:
    kwargs.setdefault("replies", [accepted(), state_reply()])
    return run_tool("swarm_send", args, **kwargs)


# -- the module ------------------------------------------------------------------


def test_module_exports_only_the_plugin_function() -> None:
    """opencode disables a plugin module with any export that is not a plugin function."""
    run = run_tool(None)
    assert run.exports == ["PigeondSwarmPlugin"]
    assert sorted(run.tools) == ["swarm_read", "swarm_send", "swarm_status"]
    assert sorted(run.hooks) == ["shell.env", "tool"]


def test_tool_names_fit_the_providers_name_rule() -> None:
    """Tool names use only letters, digits, _ and - (a dot broke every session once)."""
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in run_tool(None).tools)


def test_optional_arguments_are_nullable() -> None:
    """opencode marks every argument required, so optional ones accept null."""
    tools = run_tool(None).tools
    required = {"payload", "msg_id"}
    for tool in tools.values():
        for name, schema in tool["args"].items():
            assert ("null" in schema["type"]) == (name not in required), (name, schema)


def test_kinds_and_priorities_are_the_daemons() -> None:
    """The plugin offers exactly the kinds and priorities pigeond accepts."""
    args = run_tool(None).tools["swarm_send"]["args"]
    assert args["kind"]["enum"] == [*KINDS, None]
    assert args["priority"]["enum"] == [*PRIORITIES, None]


def test_shell_gets_the_calling_session_id() -> None:
    """The agent's shell has OPENCODE_SESSION_ID, pigeon-send's default sender."""
    hook_input = {"cwd": "/tmp", "sessionID": SESSION, "callID": "call_1"}
    assert run_tool(None, shell_env=hook_input).env == {"OPENCODE_SESSION_ID": SESSION}


@pytest.mark.parametrize("session", [None, "", "not a session", 7])
def test_shell_env_without_a_usable_session_id_adds_nothing(session: object) -> None:
    """An older opencode that passes no session id leaves the shell alone."""
    hook_input = {"cwd": "/tmp", "sessionID": session}
    assert run_tool(None, shell_env=hook_input).env == {}


# -- swarm_send ------------------------------------------------------------------


def test_send_is_from_the_calling_session_with_a_derived_msg_id() -> None:
    """The body carries from = the calling session and a msg_id the daemon accepts."""
    run = send({"to": TARGET, "payload": "hello", "kind": None, "reply_to": None})
    assert run.ok, run.error
    [post] = run.posts
    body = post["body"]
    assert post["url"] == "http://127.0.0.1:9/swarm/send"
    assert body["from"] == SESSION and body["to"] == TARGET and body["payload"] == "hello"
    assert MSG_ID_RE.fullmatch(body["msg_id"])
    assert "kind" not in body and "reply_to" not in body  # null means not given
    assert run.output == f"sent {body['msg_id']} to {TARGET}: queued"


def test_same_tool_call_gets_the_same_msg_id() -> None:
    """A retried call (same session, same call id) is the same message to the daemon."""
    first = send({"to": TARGET, "payload": "x"}, call_id="call_A")
    again = send({"to": TARGET, "payload": "x"}, call_id="call_A")
    assert first.posts[0]["body"]["msg_id"] == again.posts[0]["body"]["msg_id"]


def test_other_calls_and_sessions_get_other_msg_ids() -> None:
    """Another call id, or another session with the same call id, is another message."""
    ids = {
        send({"to": TARGET, "payload": "x"}, call_id=call, session=session).posts[0]["body"][
            "msg_id"
        ]
        for call, session in [("call_A", SESSION), ("call_B", SESSION), ("call_A", "ses_other")]
    }
    assert len(ids) == 3


def test_send_without_a_call_id_still_sends() -> None:
    """Without ctx.callID the msg_id is random (retries inside the call still share it)."""
    run = send({"to": TARGET, "payload": "x"}, call_id=None)
    assert run.ok and MSG_ID_RE.fullmatch(run.posts[0]["body"]["msg_id"])


def test_send_to_a_channel() -> None:
    """A channel message names the channel in the body and in the answer."""
    run = send({"to": None, "channel": "team.backend", "payload": "x", "priority": "urgent"})
    body = run.posts[0]["body"]
    assert body["channel"] == "team.backend" and body["priority"] == "urgent" and "to" not in body
    assert run.output is not None and "on channel team.backend" in run.output


def test_send_reports_the_state_the_daemon_has() -> None:
    """The one-line answer holds the message's state from GET /swarm/message."""
    run = send({"to": TARGET, "payload": "x"}, replies=[accepted(), state_reply("handed_off")])
    assert run.output is not None and run.output.endswith(": handed_off")
    assert run.requests[1]["url"].endswith("/swarm/message/" + run.posts[0]["body"]["msg_id"])


def test_send_is_reported_when_only_the_state_lookup_fails() -> None:
    """The message is on disk after a 202; a failed state lookup does not undo that."""
    run = send({"to": TARGET, "payload": "x"}, replies=[accepted(), refused_connection()])
    assert run.ok and run.output is not None and run.output.endswith(": queued")


def test_send_retries_5xx_and_transport_errors_with_the_same_msg_id() -> None:
    """Refused, then 503, then 202: three POSTs of one body, with growing pauses."""
    replies = [
        refused_connection(),
        {"status": 503, "body": {"error": "database unavailable"}},
        accepted(),
        state_reply(),
    ]
    run = send({"to": TARGET, "payload": "x"}, replies=replies, env={"PIGEOND_SEND_RETRY_S": "10"})
    assert run.ok, run.error
    assert len(run.posts) == 3
    assert len({repr(p["body"]) for p in run.posts}) == 1
    gaps = [b["at"] - a["at"] for a, b in zip(run.posts, run.posts[1:], strict=False)]
    assert gaps[0] >= 250 and gaps[1] >= 500


def test_unreachable_daemon_is_reported_plainly_after_the_retry_budget() -> None:
    """After PIGEOND_SEND_RETRY_S of failures the model is told nothing was sent, and why."""
    run = send({"to": TARGET, "payload": "x"}, replies=[], env={"PIGEOND_SEND_RETRY_S": "1"})
    assert not run.ok and run.error is not None
    assert run.error.startswith("swarm_send: the message was NOT sent: pigeond is unreachable")
    assert "at http://127.0.0.1:9 (connection refused; " in run.error
    assert len(run.posts) > 2


@pytest.mark.parametrize(
    ("status", "error"),
    [(400, "field 'to' must match ^ses_"), (409, "msg_id is already used"), (413, "too large")],
)
def test_daemon_4xx_is_a_tool_error_quoting_it(status: int, error: str) -> None:
    """A refusal is not retried; the tool error quotes the daemon."""
    run = send(
        {"to": TARGET, "payload": "x"}, replies=[{"status": status, "body": {"error": error}}]
    )
    assert run.error == f"swarm_send: pigeond refused it (HTTP {status}): {error}"
    assert len(run.posts) == 1


BAD_SEND_ARGS = [
    ({"payload": "x"}, "give exactly one of 'to' (a session id) or 'channel'"),
    ({"to": TARGET, "channel": "c", "payload": "x"}, "give exactly one of 'to'"),
    ({"to": 5, "payload": "x"}, "'to' must be a string, not 5"),
    ({"to": "bob", "payload": "x"}, "'to' must be a session id like ses_..., not \"bob\""),
    ({"channel": "Bad Name", "payload": "x"}, "'channel' must be a channel name"),
    ({"to": TARGET}, "'payload' (the message text) is required"),
    ({"to": TARGET, "payload": "  \n"}, "must not be empty"),
    ({"to": TARGET, "payload": ["x"]}, "'payload' must be a string"),
    ({"to": TARGET, "payload": "x", "kind": "gossip"}, "'kind' must be one of chat, task.assign"),
    ({"to": TARGET, "payload": "x", "priority": "high"}, "'priority' must be one of urgent"),
    ({"to": TARGET, "payload": "x", "reply_to": "42"}, "'reply_to' must be a msg_id"),
    ({"to": TARGET, "payload": "x", "colour": "red"}, "unknown argument 'colour'"),
    (["x"], "the arguments must be a JSON object"),
    ("x", "the arguments must be a JSON object"),
]


@pytest.mark.parametrize(("args", "error"), BAD_SEND_ARGS)
def test_bad_send_arguments_are_refused_before_any_request(args: object, error: str) -> None:
    """The plugin checks every argument (opencode does not) and says which is wrong."""
    run = run_tool("swarm_send", args)
    assert not run.ok and run.error is not None
    assert run.error.startswith("swarm_send: ") and error in run.error
    assert run.requests == []


def test_a_call_without_a_session_is_refused() -> None:
    """Without ctx.sessionID there is no sender to name."""
    run = run_tool("swarm_send", {"to": TARGET, "payload": "x"}, session=None)
    assert run.error == "swarm_send: opencode gave no usable session id (null)"


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"PIGEOND_URL": "ftp://host"}, "PIGEOND_URL must be http://HOST:PORT or unix:/path.sock"),
        ({"PIGEOND_URL": "unix:run/p.sock"}, "a unix: URL needs an absolute socket path"),
        ({"PIGEOND_SEND_RETRY_S": "soon"}, "PIGEOND_SEND_RETRY_S must be a number of seconds"),
        ({"PIGEOND_SEND_RETRY_S": "-1"}, "PIGEOND_SEND_RETRY_S must be a number of seconds"),
    ],
)
def test_bad_environment_is_a_clear_tool_error(env: dict[str, str], error: str) -> None:
    """A wrong PIGEOND_URL or retry budget is named, and nothing is sent."""
    run = send({"to": TARGET, "payload": "x"}, env=env)
    assert run.error is not None and error in run.error and run.requests == []


def test_unix_socket_url() -> None:
    """PIGEOND_URL=unix:/path sends over that socket (Bun's fetch ``unix`` option)."""
    run = send({"to": TARGET, "payload": "x"}, env={"PIGEOND_URL": "unix:/run/pigeond/p.sock"})
    assert run.posts[0]["unix"] == "/run/pigeond/p.sock"
    assert run.posts[0]["url"] == "http://localhost/swarm/send"


def test_url_with_a_trailing_slash() -> None:
    """http://host:port/ and http://host:port are the same daemon."""
    run = send({"to": TARGET, "payload": "x"}, env={"PIGEOND_URL": "http://127.0.0.1:4097/"})
    assert run.posts[0]["url"] == "http://127.0.0.1:4097/swarm/send"


# -- swarm_read ------------------------------------------------------------------


def read(args: object = None, *messages: dict[str, Any], has_more: bool = False) -> ToolRun:
    return run_tool("swarm_read", args, replies=[inbox_reply(list(messages), has_more)])


def test_read_asks_for_ten_of_the_calling_sessions_messages() -> None:
    """No arguments: this session's inbox from the start, limit 10."""
    run = read({"since": None, "limit": None})
    assert run.requests[0]["url"] == f"http://127.0.0.1:9/swarm/inbox?session={SESSION}&limit=10"


def test_read_passes_since_and_limit() -> None:
    """since and limit go to the daemon as given."""
    run = read({"since": "cur_7", "limit": 3})
    assert run.requests[0]["url"].endswith(f"?session={SESSION}&limit=3&since=cur_7")


def test_read_shows_each_message_and_the_next_cursor() -> None:
    """One header line per message, its payload, and where to go on from."""
    run = read({}, inbox_message(1, "first"), inbox_message(2, "second", kind="task.assign"))
    assert run.output == (
        "2 messages (limit 10):\n"
        "--- msg_m1 · from ses_senderCCCC · chat · normal · 2026-12-02T12:44:58Z\n"
        "first\n"
        "--- msg_m2 · from ses_senderCCCC · task.assign · normal · 2026-12-02T12:44:58Z\n"
        "second\n"
        'no more; next time call swarm_read with since="cur_2" for newer ones only'
    )


def test_read_says_when_more_are_waiting() -> None:
    """has_more ends the output with the cursor to read on from."""
    run = read({"limit": 1}, inbox_message(1, "first"), has_more=True)
    assert run.output is not None
    assert run.output.endswith('more waiting: call swarm_read with since="cur_1"')


def test_empty_inbox() -> None:
    """Nothing handed off yet is one short line."""
    assert read({}).output == "no messages"
    assert (
        read({"since": "cur_3"}).output
        == 'no messages after cur_3 (pass since="cur_3" again later)'
    )


def test_read_output_is_bounded_and_cut_payloads_name_their_msg_id() -> None:
    """Ten 5 KB payloads fit in 8 KB: each is cut with a marker naming its msg_id."""
    messages = [inbox_message(n, "x" * 5000) for n in range(10)]
    run = read({}, *messages)
    assert run.output is not None
    assert len(run.output.encode()) <= MAX_OUTPUT_BYTES
    for n in range(10):
        assert (
            f"[cut: msg_m{n} has 5000 bytes; it came whole in its <swarm_message> envelope]"
            in run.output
        )


def test_a_331_kb_payload_is_cut_to_fit() -> None:
    """The read that once flooded an agent with 331 KB now stays under 8 KB."""
    run = read({}, inbox_message(1, "y" * 331_000))
    assert run.output is not None and len(run.output.encode()) <= MAX_OUTPUT_BYTES
    assert "[cut: msg_m1 has 331000 bytes; it came whole in its <swarm_message>" in run.output


def test_messages_that_do_not_fit_are_left_for_the_next_read() -> None:
    """When the budget ends early, the cursor is the last message shown."""
    messages = [inbox_message(n, "z" * 1000) for n in range(50)]
    run = read({"limit": 50}, *messages)
    assert run.output is not None and len(run.output.encode()) <= MAX_OUTPUT_BYTES
    shown = re.findall(r"^--- (msg_m\d+) ", run.output, re.M)
    assert 1 < len(shown) < 50
    assert shown == [f"msg_m{n}" for n in range(len(shown))]
    assert run.output.endswith(f'more waiting: call swarm_read with since="{shown[-1]}"')


def test_cut_never_splits_a_character() -> None:
    """A payload of 4-byte characters is cut between characters."""
    run = read({}, inbox_message(1, "🐦" * 5000))
    assert run.output is not None
    run.output.encode("utf-8")  # a lone surrogate would raise here
    assert len(run.output.encode()) <= MAX_OUTPUT_BYTES


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"limit": 0}, "'limit' must be an integer from 1 to 50, not 0"),
        ({"limit": 51}, "'limit' must be an integer from 1 to 50"),
        ({"limit": "5"}, "'limit' must be an integer"),
        ({"limit": 2.5}, "'limit' must be an integer"),
        ({"since": "yesterday"}, "'since' must be a cursor from swarm_read (cur_N) or a msg_id"),
        ({"session": "ses_other"}, "unknown argument 'session'"),
    ],
)
def test_bad_read_arguments_are_refused(args: dict[str, Any], error: str) -> None:
    """Another session's inbox cannot be asked for; every argument is checked."""
    run = run_tool("swarm_read", args)
    assert run.error is not None and run.error.startswith("swarm_read: ") and error in run.error
    assert run.requests == []


def test_read_refused_by_the_daemon_quotes_it() -> None:
    """An unknown cursor comes back as the daemon's words."""
    reply = {"status": 400, "body": {"error": "unknown cursor 'cur_99'"}}
    run = run_tool("swarm_read", {"since": "cur_99"}, replies=[reply])
    assert run.error == "swarm_read: pigeond refused it (HTTP 400): unknown cursor 'cur_99'"


# -- swarm_status ----------------------------------------------------------------


def status(reply: dict[str, Any]) -> ToolRun:
    return run_tool("swarm_status", {"msg_id": "msg_x"}, replies=[reply])


def test_status_of_a_verified_message() -> None:
    """handed_off, with attempts and both times."""
    run = status(state_reply("handed_off", attempts=1, handed_off_at=0, verified_at=1000))
    assert run.output == (
        f"msg_x to {TARGET}: handed_off; attempts 1; handed off 1970-01-01T00:00:00Z; "
        "seen in the transcript 1970-01-01T00:00:01Z"
    )


def test_status_of_a_failed_message_names_the_error() -> None:
    """failed, with the last error."""
    run = status(state_reply("failed", attempts=10, last_error="HTTP 500 from opencode"))
    assert (
        run.output == f"msg_x to {TARGET}: failed; attempts 10; last error: HTTP 500 from opencode"
    )


def test_status_of_a_waiting_message_names_the_next_try() -> None:
    """queued, with when it is tried next."""
    run = status(state_reply("queued", attempts=2, next_retry_at=60_000, last_error="timeout"))
    assert run.output == (
        f"msg_x to {TARGET}: queued; attempts 2; next try 1970-01-01T00:01:00Z; last error: timeout"
    )


def test_status_of_an_unknown_message() -> None:
    """A 404 says the daemon has no such message."""
    run = status({"status": 404, "body": {"error": "no message msg_x"}})
    assert run.error == "swarm_status: pigeond has no message msg_x"


@pytest.mark.parametrize(
    "args", [{}, {"msg_id": "x"}, {"msg_id": None}, {"msg_id": "msg_a", "b": 1}]
)
def test_bad_status_arguments_are_refused(args: dict[str, Any]) -> None:
    """msg_id is required and must look like one."""
    run = run_tool("swarm_status", args)
    assert run.error is not None and run.error.startswith("swarm_status: ")
    assert run.requests == []


def test_status_when_the_daemon_is_down() -> None:
    """Reads retry briefly, then say the daemon is unreachable."""
    run = run_tool("swarm_status", {"msg_id": "msg_x"}, replies=[])
    assert run.error is not None
    assert run.error.startswith("swarm_status: pigeond is unreachable at http://127.0.0.1:9 ")
