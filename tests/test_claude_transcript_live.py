"""The pinned real Claude Code still writes what pigeond's transcript reader expects.

Each scenario of tests/claude_transcripts.py runs again, and its live transcript must read
as its recorded fixture does (tests/fixtures/claude/).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pigeond.delivery.claude_transcript import answers_in, envelope_homes, read_tail
from tests.claude_code import ClaudeCode
from tests.claude_transcripts import mcp_tool, plain, stop_block

pytestmark = pytest.mark.slow  # runs the real claude binary (installed with npm once)


def test_a_stop_hooks_envelope_is_seen_and_answered_live(
    claude: ClaudeCode, tmp_path: Path
) -> None:
    """A Stop hook's blocking envelope is found in the live transcript, then answered."""
    run = stop_block(claude, tmp_path)
    entries = read_tail(run.transcript())
    homes = envelope_homes(entries)
    assert list(homes) == ["msg_stop1"]
    assert list(answers_in(entries, homes)) == ["msg_stop1"]


def test_a_tool_result_quoting_an_envelope_is_not_seen_live(
    claude: ClaudeCode, tmp_path: Path
) -> None:
    """A live MCP tool result that quotes an envelope homes nothing."""
    run = mcp_tool(claude, tmp_path)
    assert run.result["result"].startswith("tool said: <swarm_message")
    assert envelope_homes(read_tail(run.transcript())) == {}


def test_a_plain_prompt_homes_nothing_live(claude: ClaudeCode, tmp_path: Path) -> None:
    """A live plain session has no envelope."""
    assert envelope_homes(read_tail(plain(claude, tmp_path).transcript())) == {}
