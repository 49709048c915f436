"""``/swarm/agent/*`` in memory: what the routes accept and refuse, and how a Claude Code
or MCP-only member is shown (pigeond/api/agents.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from pigeond.cli.presentation import detail
from pigeond.config import Config
from pigeond.model import Runtime, runtime_of
from pigeond.service.daemon import Daemon
from testkit.messages import new_message
from tests.http_helpers import daemon_call
from tests.storage_helpers import clock_daemon, repo_of

CLAUDE = "0b7c7d1e-1f7e-4d8a-9c1b-2a3b4c5d6e7f"
TRANSCRIPT = "/home/u/.claude/projects/p/0b7c7d1e-1f7e-4d8a-9c1b-2a3b4c5d6e7f.jsonl"


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Iterator[Daemon]:
    """A daemon with delivery off: every ask is answered with nothing."""
    running = clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)
    yield running
    repo_of(running).close()


def start(session: str = CLAUDE, path: object = TRANSCRIPT) -> dict[str, object]:
    return {"event": "session_start", "session": session, "transcript_path": path}


@pytest.mark.parametrize(
    ("session", "runtime"),
    [("ses_abc", Runtime.OPENCODE), (CLAUDE, Runtime.CLAUDE), ("mcp_reviewer", Runtime.MCP)],
)
def test_a_member_id_names_its_runtime(session: str, runtime: Runtime) -> None:
    """opencode's ses_…, Claude Code's UUID, an MCP-only member's mcp_<name>."""
    assert runtime_of(session) is runtime


@pytest.mark.parametrize("session", ["bob", "ses_", CLAUDE.upper(), "mcp_Bad", ""])
def test_an_id_of_no_runtime_is_refused_by_runtime_of(session: str) -> None:
    """Anything else is no member id."""
    with pytest.raises(ValueError):
        runtime_of(session)


def test_a_session_start_registers_a_claude_code_session(daemon: Daemon) -> None:
    """The SessionStart hook's call registers the session and its transcript."""
    status, answer = daemon_call(daemon, "POST", "/swarm/agent/claude/event", start())
    assert (status, answer) == (200, {"session": CLAUDE, "runtime": "claude"})
    member = repo_of(daemon).member(CLAUDE)
    assert member is not None and member.transcript_path == TRANSCRIPT


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (start(session="ses_abc"), "'session'"),
        (start(path="relative/x.jsonl"), "'transcript_path'"),
        (start(path="/home/u/../x.jsonl"), "'transcript_path'"),
        (start(path="/home/u/x.txt"), "'transcript_path'"),
        (start(path=7), "'transcript_path'"),
        ({**start(), "event": "shutdown"}, "'event'"),
    ],
)
def test_a_bad_event_is_refused_naming_the_field(
    daemon: Daemon, body: dict[str, object], names: str
) -> None:
    """A 400 that names what is wrong; nothing registered."""
    status, answer = daemon_call(daemon, "POST", "/swarm/agent/claude/event", body)
    assert status == 400 and names in answer["error"]
    assert repo_of(daemon).member(CLAUDE) is None


def test_a_turn_end_with_delivery_off_lets_the_session_stop(daemon: Daemon) -> None:
    """No delivery: the Stop hook is answered with nothing."""
    body = {"session": CLAUDE, "transcript_path": TRANSCRIPT, "stop_hook_active": False}
    status, answer = daemon_call(daemon, "POST", "/swarm/agent/claude/turn-end", body)
    assert (status, answer) == (200, {"text": None, "msg_ids": []})


@pytest.mark.parametrize(
    "body",
    [
        {"session": CLAUDE, "wait_s": 31},
        {"session": CLAUDE, "wait_s": -1},
        {"session": CLAUDE, "wait_s": True},
        {"session": "ses_abc", "wait_s": 0},
        {"wait_s": 0},
    ],
)
def test_a_bad_wait_is_refused(daemon: Daemon, body: dict[str, object]) -> None:
    """wait_s from 0 to 30, and a session that asks (a Claude Code session, mcp_<name>)."""
    status, answer = daemon_call(daemon, "POST", "/swarm/agent/wait", body)
    assert status == 400 and "error" in answer


def test_a_message_shows_its_target_s_runtime(daemon: Daemon) -> None:
    """GET /swarm/message and ``pigeon show`` (the TUI's detail) name the target's runtime."""
    repo = repo_of(daemon)
    message = new_message(CLAUDE)
    repo.accept(message, 1_000)
    status, answer = daemon_call(daemon, "GET", f"/swarm/message/{message.msg_id}")
    assert (status, answer["to_runtime"]) == (200, "claude")
    stored = repo.get(message.msg_id)
    assert stored is not None
    assert dict(detail(stored, 2_000).fields)["to_runtime"] == "claude"


def test_a_channel_wait_with_delivery_off_is_refused_at_once(daemon: Daemon) -> None:
    """Nothing can be handed off: 409 now, never a wait of wait_s."""
    status, answer = daemon_call(
        daemon, "POST", "/swarm/agent/wait", {"session": CLAUDE, "wait_s": 25}
    )
    assert status == 409 and "delivery is off" in answer["error"]


def test_stop_hook_active_must_be_true_or_false(daemon: Daemon) -> None:
    """null is not a boolean."""
    body = {"session": CLAUDE, "transcript_path": TRANSCRIPT, "stop_hook_active": None}
    status, answer = daemon_call(daemon, "POST", "/swarm/agent/claude/turn-end", body)
    assert status == 400 and "stop_hook_active" in answer["error"]
