"""Real Codex (``codex exec``, @openai/codex 0.171.0) with pigeon-mcp, as ``pigeon
install-codex --as @reviewer`` configures it, against a real pigeond and the real
opencode 1.18.33: Codex's model (tests/fake_openai.py) calls the MCP tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pigeond.cli.pigeon import main as pigeon_main
from testkit.daemon_process import DaemonProcess, isolated_env
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from tests.codex_cli import codex_exec, codex_home, ensure_codex
from tests.e2e.agents import Agent, wait_until
from tests.e2e.claude_member import receipt
from tests.fake_openai import FakeOpenAI, running_fake_openai


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with running_fake_openai() as fake:
        yield fake


@pytest.fixture
def codex_env(tmp_path: Path, fake_openai: FakeOpenAI) -> dict[str, str]:
    """Codex's environment: a private CODEX_HOME with pigeon-mcp installed as @reviewer."""
    home = codex_home(tmp_path / "codex", fake_openai.base_url)
    assert pigeon_main(["install-codex", "--as", "@reviewer"], {"CODEX_HOME": str(home)}) == 0
    env = isolated_env(tmp_path / "codex-user", {"CODEX_HOME": str(home)})
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


CodexCall = Callable[[str, dict[str, object]], str]


@pytest.fixture
def reviewer(codex_env: dict[str, str], daemon: DaemonProcess, tmp_path: Path) -> CodexCall:
    """Codex as @reviewer, its pigeon-mcp pointed at the test's pigeond: ``reviewer(tool,
    args)`` has Codex's model call ``mcp__pigeon__<tool>``; what Codex printed (the tool's
    text)."""
    env = {
        **codex_env,
        "PIGEOND_URL": daemon.base_url,
        "PIGEOND_TOKEN_FILE": str(daemon.token_file),
    }

    def call(tool: str, args: dict[str, object]) -> str:
        prompt = f"CALLTOOL mcp__pigeon__{tool} {json.dumps(args)}"
        done: subprocess.CompletedProcess[str] = codex_exec(ensure_codex(), prompt, env, tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"mcp: pigeon/{tool} (completed)" in done.stderr, done.stderr[-3000:]
        return done.stdout

    return call


def test_codex_sends_to_an_opencode_session_once(
    opencode_with_plugin: OpencodeServer,
    fake_llm: FakeLLM,
    daemon: DaemonProcess,
    reviewer: CodexCall,
) -> None:
    """swarm_send from Codex reaches the opencode session's transcript, exactly once, from
    the member mcp_reviewer."""
    target = Agent(opencode_with_plugin, fake_llm, "dirA", "target")
    said = reviewer("swarm_send", {"to": target.id, "payload": "Review PR 9"})
    assert f"to {target.id}: " in said
    [(attributes, text)] = wait_until(lambda: target.envelopes(), f"the envelope at {target.id}")
    assert attributes["from"] == "mcp_reviewer"
    assert text.endswith("\nReview PR 9\n</swarm_message>")
    answered = wait_until(lambda: receipt(daemon, attributes["msg_id"]) == "answered", "answered")
    assert answered  # its delivery is over: nothing more can come of it
    assert len(target.envelopes()) == 1


def test_codex_reads_what_was_sent_to_its_name(
    opencode_with_plugin: OpencodeServer,
    fake_llm: FakeLLM,
    daemon: DaemonProcess,
    reviewer: CodexCall,
) -> None:
    """A message sent to @reviewer is handed to Codex by its own swarm_read."""
    sender = Agent(opencode_with_plugin, fake_llm, "dirB", "sender")
    first = reviewer("swarm_read", {})  # pigeon-mcp claims @reviewer at start
    assert "pigeon-mcp:" not in first, first
    status, answer = daemon.request_json(
        "POST",
        "/swarm/send",
        {"from": sender.id, "to": "@reviewer", "payload": "Please look at PR 9"},
    )
    assert status == 202, answer
    said = reviewer("swarm_read", {}).replace('\\"', '"')  # the fake quotes JSON
    assert "<swarm_message " in said and 'to="mcp_reviewer"' in said
    assert "Please look at PR 9" in said
