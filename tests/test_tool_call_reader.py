"""Reading a member's recent pigeond tool calls from its own transcript
(pigeond/delivery/tool_call_reader.py).

The fixtures are real: opencode 1.18.33 and 1.15.4 transcripts read while the plugin's
``swarm_policy`` ran (tests/fixtures/opencode/tool-running-*.json), and a Claude Code
2.1.332 transcript of an MCP ``swarm_name`` call (tests/fixtures/claude/README.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from pigeond.delivery.claude_transcript import read_tail
from pigeond.delivery.opencode_client import DeadlineExceeded, SessionNotFound
from pigeond.delivery.tool_call_reader import (
    RECENT_MESSAGES,
    ClaudeToolCalls,
    OpencodeToolCalls,
    ToolCallReaders,
    claude_calls,
    opencode_calls,
)
from pigeond.model import Runtime
from pigeond.tool_calls import ToolCall, TranscriptUnreadable
from tests.http_helpers import failure_of, result_of

FIXTURES = Path(__file__).parent / "fixtures"
OPENCODE_VERSIONS = ("1.18.33", "1.15.4")
CLAUDE_MEMBER = "3bddb4d3-c680-4675-ac30-cec823fbc408"
CLAUDE_USE = "toolu_bed75d786f35452d85db"


def opencode_fixture(version: str) -> list[dict[str, Any]]:
    text = (FIXTURES / "opencode" / f"tool-running-{version}.json").read_text("utf-8")
    messages: list[dict[str, Any]] = json.loads(text)
    return messages


def session_of(messages: list[dict[str, Any]]) -> str:
    return str(messages[0]["info"]["sessionID"])


class StubOpencode:
    """The registry and the client the opencode reader asks (one session's transcript)."""

    def __init__(self, messages: list[dict[str, Any]] | Exception) -> None:
        self.answer = messages
        self.asked: list[tuple[str, str, int | None]] = []
        self.hang: Deferred[None] | None = None

    async def resolve(self, session_id: str) -> str:
        return "/home/user/project"

    def invalidate(self, session_id: str) -> None:
        return None

    async def messages(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        self.asked.append((session_id, directory, limit))
        if self.hang is not None:
            await self.hang
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def opencode_reader(stub: StubOpencode, clock: Clock | None = None) -> OpencodeToolCalls:
    return OpencodeToolCalls(stub, stub, clock or Clock(), deadline_s=5)


def read(reader: Any, member: str) -> Deferred[Any]:
    return Deferred.fromCoroutine(reader.recent_calls(member))


@pytest.mark.parametrize("version", OPENCODE_VERSIONS)
def test_opencode_shows_the_plugin_call_in_flight_with_its_input(version: str) -> None:
    """While the plugin's tool runs, its call is in the transcript, unfinished, with the
    model's arguments (real opencode)."""
    messages = opencode_fixture(version)
    calls = opencode_calls(messages)
    assert [(c.tool, c.finished) for c in calls] == [
        ("swarm_name", True),
        ("swarm_policy", False),
    ]
    assert calls[1].input == {"policy": "hold", "allow": ["ses_x"]}
    assert calls[1].call_id.startswith("call_")


def test_opencode_reader_reads_the_newest_messages_in_the_session_directory() -> None:
    """The reader asks opencode for the newest RECENT_MESSAGES in the session's directory."""
    messages = opencode_fixture("1.18.33")
    stub = StubOpencode(messages)
    session = session_of(messages)
    calls = result_of(read(opencode_reader(stub), session))
    assert stub.asked == [(session, "/home/user/project", RECENT_MESSAGES)]
    assert [c.tool for c in calls] == ["swarm_name", "swarm_policy"]


def test_opencode_counts_only_pigeond_tools_of_assistant_messages() -> None:
    """Another tool's call, or a tool part in a user message, is not a pigeond call."""
    part = {"type": "tool", "callID": "call_1", "tool": "bash",
            "state": {"status": "running", "input": {"command": "ls"}}}  # fmt: skip
    ours = {**part, "callID": "call_2", "tool": "swarm_send"}
    messages = [
        {"info": {"role": "assistant"}, "parts": [part]},
        {"info": {"role": "user"}, "parts": [ours]},
        {"info": {"role": "assistant"}, "parts": [ours, "junk", {"type": "tool"}]},
    ]
    assert opencode_calls(messages) == [
        ToolCall("call_2", "swarm_send", {"command": "ls"}, finished=False)
    ]


@pytest.mark.parametrize("status", ["completed", "error"])
def test_opencode_call_that_ended_is_finished(status: str) -> None:
    """A completed or failed call is finished; pending and running ones are not."""
    part = {"type": "tool", "callID": "c", "tool": "swarm_name",
            "state": {"status": status, "input": {"name": "x"}}}  # fmt: skip
    assert opencode_calls([{"info": {"role": "assistant"}, "parts": [part]}])[0].finished


def test_opencode_session_that_does_not_exist_made_no_call() -> None:
    """opencode's 404 for the session: no calls (it made none), not unreadable."""
    stub = StubOpencode(SessionNotFound("GET /session/ses_x/message: session not found"))
    assert result_of(read(opencode_reader(stub), "ses_x")) == []


def test_opencode_out_makes_the_transcript_unreadable() -> None:
    """opencode unreachable, 5xx or past its deadline: TranscriptUnreadable."""
    stub = StubOpencode(DeadlineExceeded("GET /session/ses_x/message: no answer in 5 s"))
    failure = failure_of(read(opencode_reader(stub), "ses_x"))
    assert failure.check(TranscriptUnreadable)


def test_opencode_read_that_hangs_is_unreadable_at_its_deadline() -> None:
    """A read that never ends is given up at the reader's deadline."""
    clock = Clock()
    stub = StubOpencode([])
    stub.hang = Deferred()
    reading = read(opencode_reader(stub, clock), "ses_x")
    clock.advance(4.9)
    assert not reading.called
    clock.advance(0.2)
    failure = failure_of(reading)
    assert failure.check(TranscriptUnreadable)
    assert "longer than 5 s" in str(failure.value)


def test_opencode_reader_has_no_transcript_of_another_runtime() -> None:
    """A Claude Code or MCP-only member is not opencode's: None."""
    stub = StubOpencode([])
    assert result_of(read(opencode_reader(stub), "mcp_codex")) is None
    assert stub.asked == []


def claude_fixture() -> list[dict[str, Any]]:
    return read_tail(FIXTURES / "claude" / "mcp_swarm_name.jsonl")


def test_claude_mcp_call_in_flight_is_unfinished() -> None:
    """The tool_use of an MCP swarm_name, before its tool_result: unfinished, with its input."""
    in_flight = claude_fixture()[:2]
    assert claude_calls(in_flight) == [
        ToolCall(CLAUDE_USE, "swarm_name", {"name": "reviewer"}, finished=False)
    ]


def test_claude_mcp_call_with_its_result_is_finished() -> None:
    """A later tool_result with the tool_use's id finishes it."""
    assert [c.finished for c in claude_calls(claude_fixture())] == [True]


def test_claude_counts_only_pigeond_tools_of_an_mcp_server() -> None:
    """A built-in tool, another server's tool, or a subagent's call is not a pigeond call."""

    def use(name: str, **extra: Any) -> dict[str, Any]:
        block = {"type": "tool_use", "id": f"toolu_{name}", "name": name, "input": {}}
        return {"type": "assistant", "message": {"role": "assistant", "content": [block]},
                **extra}  # fmt: skip

    entries = [
        use("Bash"),
        use("mcp__other__search"),
        use("mcp__pigeon__swarm_send", isSidechain=True),
        use("mcp__my__pigeon__swarm_send"),
    ]
    assert [c.call_id for c in claude_calls(entries)] == ["toolu_mcp__my__pigeon__swarm_send"]


def in_thread(call: Callable[[], Any]) -> Deferred[Any]:
    try:
        return succeed(call())
    except Exception as e:
        d: Deferred[Any] = Deferred()
        d.errback(e)
        return d


def claude_reader(path: str | None) -> ClaudeToolCalls:
    return ClaudeToolCalls(lambda member: succeed(path), in_thread, Clock())


def test_claude_reader_reads_the_transcript_its_hooks_named(tmp_path: Path) -> None:
    """The reader finds the calls in the file at the member's transcript path."""
    path = tmp_path / "t.jsonl"
    path.write_bytes((FIXTURES / "claude" / "mcp_swarm_name.jsonl").read_bytes())
    calls = result_of(read(claude_reader(str(path)), CLAUDE_MEMBER))
    assert [(c.call_id, c.tool) for c in calls] == [(CLAUDE_USE, "swarm_name")]


def test_claude_transcript_gone_is_unreadable(tmp_path: Path) -> None:
    """A transcript path with no file behind it: TranscriptUnreadable."""
    failure = failure_of(read(claude_reader(str(tmp_path / "gone.jsonl")), CLAUDE_MEMBER))
    assert failure.check(TranscriptUnreadable)


def test_claude_member_with_no_known_transcript_has_none() -> None:
    """A session whose hooks never named a transcript: pigeond has none to read (None)."""
    assert result_of(read(claude_reader(None), CLAUDE_MEMBER)) is None


class Named:
    def __init__(self, name: str) -> None:
        self.name = name

    async def recent_calls(self, member: str) -> list[ToolCall]:
        return [ToolCall(self.name, "swarm_send", {}, finished=False)]


@pytest.mark.parametrize(
    ("member", "reader"),
    [("ses_abc", "opencode"), (CLAUDE_MEMBER, "claude"), ("mcp_codex", None), ("nobody", None)],
)
def test_readers_pick_the_member_runtime(member: str, reader: str | None) -> None:
    """opencode and Claude Code members go to their reader; MCP-only and other ids: None."""
    readers = ToolCallReaders(
        {Runtime.OPENCODE: Named("opencode"), Runtime.CLAUDE: Named("claude")}
    )
    calls = result_of(read(readers, member))
    assert (calls[0].call_id if calls else None) == reader
