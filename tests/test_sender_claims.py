"""What the send path knows of a sender when it stores a message (pigeond/api/
sender_claims.py), and how pigeon-send says it runs at a person's terminal."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from pigeond.api.callers import Caller
from pigeond.api.sender_claims import sender_claim
from pigeond.cli.pigeon_send import at_a_terminal, build_request
from pigeond.cli.pigeon_send_args import build_parser
from pigeond.config import Config
from pigeond.model import SenderProof
from pigeond.service.daemon import Daemon
from pigeond.tool_calls import plugin_msg_id
from testkit.messages import new_message
from tests.fixed_time import NOW_MS
from tests.http_helpers import daemon_call
from tests.storage_helpers import clock_daemon, repo_of

CLAUDE = "0b8e6f5c-1d2a-4c3b-9e8f-7a6b5c4d3e2f"
PERSON = Caller("session:77", 4242, None, True)
AGENT_BASH = Caller("agent:4000", 4242, "opencode", False)


class Tty(io.StringIO):
    """A stream that is a terminal."""

    def isatty(self) -> bool:
        return True


def claim(sender: str, msg_id: str, caller: Caller | None = None) -> tuple[str, str | None]:
    made = sender_claim(new_message(sender=sender, msg_id=msg_id), caller, NOW_MS, 10_000)
    return made.proof.value, made.note


def test_a_tools_send_is_pending_until_its_deadline() -> None:
    """An opencode session's send with the plugin's msg_id waits to be looked for."""
    made = sender_claim(
        new_message(sender="ses_a", msg_id=plugin_msg_id("ses_a", "c1")), None, NOW_MS, 10_000
    )
    assert (made.proof, made.settle_by) == (SenderProof.PENDING, NOW_MS + 10_000)


def test_a_claude_code_tools_send_is_pending() -> None:
    """pigeon-mcp's ``msg_tool_`` ids from a Claude Code session are looked for too."""
    assert claim(CLAUDE, "msg_tool_0123abcd")[0] == "pending"


def test_a_send_no_tool_made_is_unverified_at_once() -> None:
    """A msg_id no pigeond tool makes is never found: unverified, and it never waits."""
    assert claim("ses_a", "msg_20261101_abc") == (
        "unverified", "not sent by a pigeond tool (a tool's msg_id starts with msg_tool_)",
    )  # fmt: skip


@pytest.mark.parametrize("sender", ["mcp_reviewer", "alice", "ses"])
def test_a_sender_without_a_readable_transcript_is_unverified(sender: str) -> None:
    """An MCP-only member, or any other name: pigeond has nothing to look in."""
    assert claim(sender, "msg_tool_0123") == (
        "unverified", f"{sender} has no transcript pigeond can read",
    )  # fmt: skip


def test_a_persons_shell_is_a_person() -> None:
    """``via: terminal`` from a process at a terminal with no agent above it."""
    assert claim("ses_a", "msg_1", PERSON) == (
        "person", "sent from a terminal, pid 4242, at a terminal",
    )  # fmt: skip


def test_a_terminal_claim_from_an_agents_process_is_unverified() -> None:
    """An agent's bash tool saying ``via: terminal`` is not believed."""
    proof, note = claim("ses_a", "msg_1", AGENT_BASH)
    assert proof == "unverified" and note is not None and "started by opencode" in note


def test_via_terminal_over_tcp_is_unverified(tmp_path: Path, clock: Clock) -> None:
    """Over TCP the kernel names no process: a send saying ``via: terminal`` is stored
    unverified, saying why (and GET /swarm/message shows it)."""
    daemon: Daemon = clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)
    body = {"from": "ses_a", "to": "ses_b", "payload": "hi", "via": "terminal"}
    status, answer = daemon_call(daemon, "POST", "/swarm/send", body)
    assert status == 202
    status, shown = daemon_call(daemon, "GET", f"/swarm/message/{answer['msg_id']}")
    assert (status, shown["from_verified"]) == (200, "unverified")
    assert "said it came from a terminal, but a TCP client" in shown["from_verified_note"]
    stored = repo_of(daemon).get(str(answer["msg_id"]))
    assert stored is not None and stored.from_proof == "unverified"


def test_via_takes_only_terminal(tmp_path: Path, clock: Clock) -> None:
    """Any other ``via`` is a 400 naming the field."""
    daemon = clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)
    body = {"from": "ses_a", "to": "ses_b", "payload": "hi", "via": "agent"}
    status, answer = daemon_call(daemon, "POST", "/swarm/send", body)
    assert status == 400 and "field 'via'" in answer["error"]


def test_pigeon_send_at_a_terminal_says_so() -> None:
    """A terminal on stdin (or stderr, the payload piped in) and no agent's marker."""
    assert at_a_terminal({}, Tty(), io.StringIO())
    assert at_a_terminal({}, io.StringIO(), Tty())
    assert not at_a_terminal({}, io.StringIO(), io.StringIO())


@pytest.mark.parametrize("marker", ["OPENCODE", "OPENCODE_SESSION_ID", "CLAUDECODE"])
def test_pigeon_send_under_an_agent_never_says_terminal(marker: str) -> None:
    """An agent's shell may have a terminal: its marker in the environment wins."""
    assert not at_a_terminal({marker: "1"}, Tty(), Tty())


def test_pigeon_send_at_a_terminal_sends_via_terminal() -> None:
    """The body says ``via: terminal`` only when run at a person's terminal."""
    args = build_parser().parse_args(["--from", "ses_a", "ses_b", "hi"])
    assert build_request(args, {}, io.StringIO(), terminal=True)["via"] == "terminal"
    assert "via" not in build_request(args, {}, io.StringIO())
