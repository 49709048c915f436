"""The real Claude Code runs offline against the fake model (tests/claude_code.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.claude_code import CLAUDE_CODE_VERSION, ClaudeCode
from tests.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.slow  # runs the real claude binary (installed with npm once)


def test_a_prompt_is_answered_by_the_fake_model(
    claude: ClaudeCode, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    """claude -p reaches the fake model and prints its answer as the JSON result."""
    run = claude.run("hello", tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.result["result"] == "ok: hello"
    assert fake_anthropic.last_user_texts() == [["hello"]]


def test_the_transcript_names_the_pinned_version(claude: ClaudeCode, tmp_path: Path) -> None:
    """The transcript the run wrote is the pinned version's, under the private HOME."""
    run = claude.run("hello", tmp_path)
    versions = {e["version"] for e in run.entries() if e.get("type") == "user"}
    assert versions == {CLAUDE_CODE_VERSION}
    assert run.transcript().is_relative_to(claude.home)


def test_a_calltool_prompt_calls_the_tool(
    claude: ClaudeCode, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    """CALLTOOL makes the fake model call an MCP tool; its result comes back to the model."""
    server = Path(__file__).resolve().parent / "mcp_echo_server.py"
    config = tmp_path / "mcp.json"
    servers = {"echo": {"command": sys.executable, "args": [str(server)]}}
    config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    run = claude.run(
        'CALLTOOL mcp__echo__echo {"text": "pong"}',
        tmp_path,
        "--mcp-config",
        str(config),
        "--allowedTools",
        "mcp__echo__echo",
    )
    assert run.result["result"] == "tool said: pong"
    assert len(fake_anthropic.model_calls()) == 2
