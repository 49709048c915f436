"""After ``pigeon install-claude``, the real Claude Code loads pigeond's server, hooks and skill.

A plain ``claude -p`` (no --mcp-config, no --settings) in the project (or anywhere, for
--user) against the fake model; pigeon-hook asks a stand-in of pigeond's agent routes
(testkit/agent_routes_standin.py).  The ``pigeon`` MCP server here is a stand-in too
(tests/mcp_echo_server.py, installed as the ``pigeon-mcp`` program): what is checked is
that Claude Code starts the server the install registered and lets the model call it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pigeond.cli import install_claude
from pigeond.cli.install_claude import Programs
from pigeond.cli.install_plugin import SKILL_NAME
from pigeond.delivery.claude_transcript import answers_in, envelope_homes, read_tail
from testkit.agent_routes_standin import AgentRoutesStandIn
from tests.claude_code import ClaudeCode, ClaudeRun

pytestmark = pytest.mark.slow  # runs the real claude binary (installed with npm once)

ECHO_SERVER = Path(__file__).resolve().parent / "mcp_echo_server.py"
BATCH = (
    '<swarm_message v="1" kind="chat" from="ses_peer" to="{session}" msg_id="msg_e2e1"'
    ' priority="normal">\nhello from the swarm\n</swarm_message>'
)


def programs(tmp_path: Path) -> Programs:
    """The real pigeon-hook; a pigeon-mcp that runs the echo server."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mcp = bin_dir / "pigeon-mcp"
    mcp.write_text(f"#!/bin/sh\nexec {sys.executable} {ECHO_SERVER}\n", encoding="utf-8")
    mcp.chmod(0o755)
    return Programs(str(Path(sys.executable).parent / "pigeon-hook"), str(mcp))


def run_in(claude: ClaudeCode, cwd: Path, standin: AgentRoutesStandIn) -> ClaudeRun:
    prompt = 'CALLTOOL mcp__pigeon__echo {"text": "pong"}'
    env = {"PIGEOND_URL": standin.url}
    run = claude.run(prompt, cwd, "--allowedTools", "mcp__pigeon", env=env)
    assert run.returncode == 0, (run.stdout, run.stderr)
    return run


def listed_skills(entries: list[dict[str, Any]]) -> str:
    return "".join(
        str(e["attachment"].get("content", ""))
        for e in entries
        if e.get("type") == "attachment" and e["attachment"].get("type") == "skill_listing"
    )


def test_a_project_install_loads_server_hooks_and_skill(
    claude: ClaudeCode, standin: AgentRoutesStandIn, tmp_path: Path
) -> None:
    """In DIR: the pigeon server answers a tool call, each hook reaches pigeond, and the
    skill is listed to the model."""
    project = tmp_path / "project"
    project.mkdir()
    assert install_claude.run(str(project), False, {}, programs(tmp_path)) == 0
    run = run_in(claude, project, standin)
    assert run.result["result"] == "tool said: pong"
    events = [(s.path, s.body.get("event")) for s in standin.seen]
    assert events == [
        ("/swarm/agent/claude/event", "session_start"),
        ("/swarm/agent/claude/event", "prompt_submit"),
        ("/swarm/agent/claude/turn-end", None),
    ]
    assert {s.body["session"] for s in standin.seen} == {run.session_id}
    assert {s.body["transcript_path"] for s in standin.seen} == {str(run.transcript())}
    assert f"- {SKILL_NAME}:" in listed_skills(run.entries())


def test_a_batch_handed_off_at_the_stop_is_seen_and_answered(
    claude: ClaudeCode, standin: AgentRoutesStandIn, tmp_path: Path
) -> None:
    """The Stop hook's batch runs one more turn: its envelope is in the transcript, the
    turn answers it, and the next Stop says stop_hook_active."""
    project = tmp_path / "project"
    project.mkdir()
    install_claude.run(str(project), False, {}, programs(tmp_path))
    session = "5f0c7a3e-1d2b-4c5d-8e9f-0a1b2c3d4e5f"
    standin.answer_once({"session": session, "runtime": "claude"})  # session_start
    standin.answer_once({"session": session, "runtime": "claude"})  # prompt_submit
    standin.answer_once({"text": BATCH.format(session=session), "msg_ids": ["msg_e2e1"]})
    standin.answer({"text": None, "msg_ids": []})
    run = claude.run("hello", project, "--session-id", session, env={"PIGEOND_URL": standin.url})
    assert run.result["result"].startswith('ok: <swarm_message v="1" kind="chat"')
    turn_ends = [s.body for s in standin.seen if s.path.endswith("/turn-end")]
    assert [t["stop_hook_active"] for t in turn_ends] == [False, True]
    entries = read_tail(run.transcript())
    homes = envelope_homes(entries)
    assert list(homes) == ["msg_e2e1"]
    assert list(answers_in(entries, homes)) == ["msg_e2e1"]


def test_a_user_install_loads_everywhere(
    claude: ClaudeCode, standin: AgentRoutesStandIn, tmp_path: Path
) -> None:
    """--user (~/.claude.json, ~/.claude/settings.json, ~/.claude/skills): a session in any
    folder has the server, the hooks and the skill."""
    claude.run("hello", tmp_path)  # Claude Code makes its ~/.claude.json first
    state = json.loads((claude.home / ".claude.json").read_text(encoding="utf-8"))
    env = {"HOME": str(claude.home)}
    assert install_claude.run(None, False, env, programs(tmp_path)) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = run_in(claude, elsewhere, standin)
    assert run.result["result"] == "tool said: pong"
    assert [s.body.get("event") for s in standin.seen][:2] == ["session_start", "prompt_submit"]
    assert f"- {SKILL_NAME}:" in listed_skills(run.entries())
    after = json.loads((claude.home / ".claude.json").read_text(encoding="utf-8"))
    assert {k: v for k, v in after.items() if k != "mcpServers"}.keys() >= state.keys()


def test_the_real_pigeon_mcp_answers_after_a_cli_install(
    claude: ClaudeCode, standin: AgentRoutesStandIn, tmp_path: Path
) -> None:
    """`pigeon install-claude --project DIR` names the installed pigeon-mcp: a plain claude -p
    in DIR calls its swarm_status tool (pigeond is the stand-in, which knows no message)."""
    project = tmp_path / "project"
    project.mkdir()
    pigeon = Path(sys.executable).parent / "pigeon"
    done = subprocess.run(
        [str(pigeon), "install-claude", "--project", str(project)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    prompt = 'CALLTOOL mcp__pigeon__swarm_status {"msg_id": "msg_nope"}'
    run = claude.run(
        prompt, project, "--allowedTools", "mcp__pigeon", env={"PIGEOND_URL": standin.url}
    )
    tool_results = [
        block
        for entry in run.entries()
        if entry.get("type") == "user" and isinstance(entry["message"]["content"], list)
        for block in entry["message"]["content"]
        if block.get("type") == "tool_result"
    ]
    assert len(tool_results) == 1
    assert "haven't granted" not in json.dumps(tool_results)
    assert run.result["result"].startswith("tool said: swarm_status: ")
