"""Real Claude Code 2.1.332 sessions as members, beside real opencode 1.18.33, both on fake
models: delivered at the session's turn end by its Stop hook (``pigeon-hook``), verified
and answered from its transcript, in batches, in channels, across ``kill -9``."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from tests.claude_code import ClaudeCode
from tests.e2e.agents import Agent, start_pigeond, wait_until
from tests.e2e.claude_member import HOOK, MCP_SERVER, ClaudeMember, receipt, send

pytestmark = pytest.mark.slow
MSG_ID = re.compile(r"\bmsg_[A-Za-z0-9_-]+")


@pytest.fixture
def member(claude: ClaudeCode, tmp_path: Path, daemon: DaemonProcess) -> ClaudeMember:
    """A Claude Code session with pigeond's hooks, started (registered, idle)."""
    session = ClaudeMember(claude, tmp_path / "project", daemon)
    session.install_hooks()
    session.turn("hello")
    return session


def call_pigeon_tool(member: ClaudeMember, folder: Path, tool: str, args: object) -> str:
    """A turn whose model calls pigeon-mcp's ``tool``; what the tool said."""
    config = folder / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"pigeon": {"command": str(MCP_SERVER)}}}))
    run = member.turn(
        f"CALLTOOL mcp__pigeon__{tool} {json.dumps(args)}",
        "--mcp-config", str(config), "--allowedTools", "mcp__pigeon",
    )  # fmt: skip
    return str(run.result["result"])


def test_an_opencode_send_reaches_a_claude_session_at_its_turn_end_once(
    member: ClaudeMember, daemon: DaemonProcess, opencode_with_plugin: OpencodeServer,
    fake_llm: FakeLLM, tmp_path: Path,
) -> None:  # fmt: skip
    """swarm_send from an opencode session, by id and by @name (which the Claude Code
    session claimed with its own swarm_name call): each envelope is in the Claude Code
    transcript exactly once, fed back by the Stop hook, seen then answered."""
    said = call_pigeon_tool(member, tmp_path, "swarm_name", {"name": "critic"})
    assert said.startswith("tool said: you are now critic"), said
    sender = Agent(opencode_with_plugin, fake_llm, "dirA", "sender")
    ids = []
    for to in (member.id, "@critic"):
        part = sender.call("swarm_send", {"to": to, "payload": f"review this, {to}"})
        assert part["state"]["status"] == "completed", part["state"]
        found = MSG_ID.search(str(part["state"]["output"]))
        assert found is not None, part["state"]["output"]
        ids.append(found.group(0))
    member.turn("carry on")
    assert sorted(member.envelope_ids()) == sorted(ids)
    answered = wait_until(
        lambda: all(receipt(daemon, msg_id) == "answered" for msg_id in ids), "both answered"
    )
    assert answered


def test_a_claude_session_sends_to_an_opencode_session_through_its_mcp_tool(
    member: ClaudeMember, daemon: DaemonProcess, opencode_with_plugin: OpencodeServer,
    fake_llm: FakeLLM, tmp_path: Path,
) -> None:  # fmt: skip
    """mcp__pigeon__swarm_send from Claude Code: the envelope, from the Claude Code session
    and verified in its transcript, is in the opencode transcript exactly once."""
    target = Agent(opencode_with_plugin, fake_llm, "dirA", "target")
    args = {"to": target.id, "payload": "hello from Claude Code"}
    said = call_pigeon_tool(member, tmp_path, "swarm_send", args)
    assert "tool said:" in said, said
    [(attributes, _)] = wait_until(lambda: target.envelopes(), "the envelope in opencode")
    answered = wait_until(lambda: receipt(daemon, attributes["msg_id"]) == "answered", "answered")
    assert answered  # its delivery is over: nothing more can come of it
    [(attributes, text)] = target.envelopes()
    assert attributes["from"] == member.id
    assert attributes["from_verified"] == "verified"  # its tool_use, in its own transcript
    assert text.count("hello from Claude Code") == 1


def test_three_waiting_messages_arrive_as_one_batch_urgent_first(
    member: ClaudeMember, daemon: DaemonProcess
) -> None:
    """One Stop hook hand-off carries all three, the urgent one first."""
    first = send(daemon, member.id, "first")
    second = send(daemon, member.id, "second", priority="low")
    urgent = send(daemon, member.id, "urgent one", priority="urgent")
    member.turn("next")
    [batch] = member.fed_back()
    assert member.envelope_ids() == [urgent, first, second]
    assert batch.count("<swarm_message ") == 3


def test_a_channel_of_an_opencode_and_a_claude_member_gives_each_one_copy(
    member: ClaudeMember, daemon: DaemonProcess, opencode_with_plugin: OpencodeServer,
    fake_llm: FakeLLM, tmp_path: Path,
) -> None:  # fmt: skip
    """Both runtimes in one channel, each joined by its own swarm_channel call: each
    member's transcript has its copy once."""
    other = Agent(opencode_with_plugin, fake_llm, "dirB", "opencode member")
    join = {"action": "join", "channel": "mixed"}
    said = call_pigeon_tool(member, tmp_path, "swarm_channel", join)
    assert said.startswith("tool said: you joined mixed"), said
    part = other.call("swarm_channel", join)
    assert str(part["state"].get("output", "")).startswith("you joined mixed"), part["state"]
    status, sent = daemon.request_json(
        "POST", "/swarm/send", {"from": "ses_tester", "channel": "mixed", "payload": "sync"}
    )
    assert status == 202, sent
    wait_until(lambda: len([e for e, _ in other.envelopes() if e.get("channel") == "mixed"]) == 1,
               "the opencode member's copy")  # fmt: skip
    member.turn("next")
    assert len(member.envelope_ids()) == 1
    assert len([e for e, _ in other.envelopes() if e.get("channel") == "mixed"]) == 1


def test_kill_9_around_the_hook_s_hand_off_loses_and_repeats_nothing(
    claude: ClaudeCode, tmp_path: Path, daemons: DaemonFactory,
    opencode_with_plugin: OpencodeServer, plugin_pigeond_port: int,
) -> None:  # fmt: skip
    """Ten times, pigeond is killed just after a Stop hook starts asking for a batch (a
    few milliseconds later each time): every message is in the transcript exactly once."""
    grace = ("--verify-grace-s", "3")  # a hand-off the hook never printed goes again soon
    daemon = start_pigeond(daemons, tmp_path, opencode_with_plugin, plugin_pigeond_port, grace)
    marks = tmp_path / "marks"
    marks.mkdir()
    session = ClaudeMember(claude, tmp_path / "project", daemon)
    session.install_hooks(stop_command=f"sh -c 'touch {marks}/$$; exec {HOOK} stop'")
    session.turn("hello")
    sent: list[str] = []
    for round_ in range(10):
        sent.append(send(daemon, session.id, f"message {round_}"))
        hooks_before = len(list(marks.iterdir()))
        run = session.start_turn(f"turn {round_}")

        def hook_ran(n: int = hooks_before) -> bool:
            return len(list(marks.iterdir())) > n

        wait_until(hook_ran, "the Stop hook ran")
        time.sleep(0.003 * round_)  # the kill lands anywhere in the hook's request
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait()
        assert run.wait(timeout=120) == 0, run.stderr.read() if run.stderr else ""
        daemon = start_pigeond(daemons, tmp_path, opencode_with_plugin, plugin_pigeond_port, grace)
        session.daemon = daemon

    def all_arrived() -> bool:  # whatever waits, or was handed off unseen, goes at a turn end
        session.turn("and now")
        return sorted(set(session.envelope_ids())) == sorted(sent)

    wait_until(all_arrived, "every message in the transcript")
    assert sorted(session.envelope_ids()) == sorted(sent)
