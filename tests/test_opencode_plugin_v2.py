"""pigeond's opencode 2.x plugin, loaded by node with a stand-in of opencode 2.x's plugin
context: the definition it exports, the tools it adds, and that each tool answers as the
1.x plugin's does (their logic is one, src/tools.js, whose tests are the 1.x plugin's).

No opencode 2.x runs here; the stand-in ``ctx`` is written from the released plugin API.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.plugin_runner import accepted, inbox_message, run_tool
from tests.plugin_v2_runner import run_v2_tool

pytestmark = pytest.mark.slow  # the comparisons run the opencode binary too

TARGET = "ses_targetBBBB"
TOOLS = ["swarm_send", "swarm_read", "swarm_status", "swarm_name", "swarm_policy", "swarm_channel"]
INBOX = {"messages": [inbox_message(1, "line one\n</swarm_message> & <b>")], "next_cursor": "cur_7"}


def sent_requests(requests: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    """What a run asked the daemon, without the times it asked."""
    return [(r["method"], r["url"], r["body"]) for r in requests]


def test_module_exports_only_a_definition_with_an_id_and_setup() -> None:
    """The module's one export is the default definition opencode 2.x loads: {id, setup}."""
    run = run_v2_tool(None)
    assert run.exports == ["default"]
    assert run.definition == {"id": "pigeond-swarm", "setup": "function"}


def test_setup_adds_the_1x_plugin_s_tools_in_one_transform() -> None:
    """setup adds, through ctx.tool.transform, exactly the tools the 1.x plugin has."""
    run = run_v2_tool(None)
    assert run.transforms == 1
    assert [t["name"] for t in run.tools] == TOOLS
    assert list(run_tool(None).tools) == TOOLS


def test_every_tool_is_added_with_codemode_off() -> None:
    """Each tool has codemode false, so the model calls it directly, with an execute."""
    for tool in run_v2_tool(None).tools:
        assert tool["options"] == {"codemode": False}, tool["name"]
        assert tool["execute"] == "function", tool["name"]


def test_descriptions_and_arguments_are_the_1x_plugin_s() -> None:
    """A tool's description and argument schemas are the 1.x tool's, as one object schema."""
    v1 = run_tool(None).tools
    for tool in run_v2_tool(None).tools:
        name = tool["name"]
        assert tool["description"] == v1[name]["description"]
        assert tool["input"] == {
            "type": "object",
            "properties": v1[name]["args"],
            "required": list(v1[name]["args"]),
            "additionalProperties": False,
        }


def test_every_tool_answers_text() -> None:
    """Each tool's output schema is one string, the text the model reads."""
    for tool in run_v2_tool(None).tools:
        assert tool["output"]["type"] == "object"
        assert tool["output"]["required"] == ["text"]
        assert tool["output"]["properties"]["text"]["type"] == "string"


def test_send_answers_and_asks_as_the_1x_tool_does() -> None:
    """swarm_send: for the same daemon answers, the same text and the same requests."""
    args = {"to": TARGET, "payload": "hello", "kind": None, "priority": "urgent"}
    replies = [accepted(), {"status": 200, "body": {"state": "handed_off"}}]
    v1 = run_tool("swarm_send", args, replies=replies)
    v2 = run_v2_tool("swarm_send", args, replies=replies)
    assert v1.ok and v2.ok
    assert v2.result == {"output": {"text": v1.output}, "content": v1.output}
    assert sent_requests(v2.requests) == sent_requests(v1.requests)


def test_the_call_id_is_the_one_opencode_2x_gives_as_id() -> None:
    """The 2.x context's id is the call id: swarm_send's msg_id is the 1.x one for that call."""
    args = {"to": TARGET, "payload": "hello"}
    v1 = run_tool("swarm_send", args, replies=[accepted()], call_id="call_9")
    v2 = run_v2_tool("swarm_send", args, replies=[accepted()], call_id="call_9")
    other = run_v2_tool("swarm_send", args, replies=[accepted()], call_id="call_10")
    assert v2.requests[0]["body"]["msg_id"] == v1.requests[0]["body"]["msg_id"]
    assert other.requests[0]["body"]["msg_id"] != v1.requests[0]["body"]["msg_id"]


def test_read_shows_the_inbox_as_the_1x_tool_does() -> None:
    """swarm_read: the same quoted, escaped page for the same inbox."""
    replies = [{"status": 200, "body": INBOX}, {"status": 404, "body": {"error": "no route"}}]
    v1 = run_tool("swarm_read", {"since": None, "limit": None}, replies=replies)
    v2 = run_v2_tool("swarm_read", {"since": None, "limit": None}, replies=replies)
    assert v1.ok and v2.ok
    assert v2.result == {"output": {"text": v1.output}, "content": v1.output}
    assert "&lt;/swarm_message&gt;" in (v1.output or "")


def test_a_refusal_is_the_1x_tool_s_error() -> None:
    """A daemon's refusal fails the 2.x tool with the 1.x tool's message."""
    replies = [{"status": 404, "body": {"error": f"no session {TARGET}"}}]
    v1 = run_tool("swarm_send", {"to": TARGET, "payload": "hi"}, replies=replies)
    v2 = run_v2_tool("swarm_send", {"to": TARGET, "payload": "hi"}, replies=replies)
    assert v1.ok is False and v2.ok is False
    assert v2.error == v1.error
    assert "NOT sent" in (v2.error or "")


def test_bad_arguments_are_refused_as_the_1x_tool_refuses_them() -> None:
    """Arguments the shared parser refuses fail the 2.x tool before any request."""
    v2 = run_v2_tool("swarm_name", {"name": "Not A Name"})
    v1 = run_tool("swarm_name", {"name": "Not A Name"})
    assert v2.ok is False
    assert v2.error == v1.error
    assert v2.requests == []


def test_a_call_without_a_session_is_refused() -> None:
    """Without a usable session id from opencode 2.x the tool refuses, as on 1.x."""
    v2 = run_v2_tool("swarm_read", {}, session=None)
    assert v2.ok is False
    assert "no usable session id" in (v2.error or "")
    assert v2.requests == []
