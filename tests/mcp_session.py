"""pigeon-mcp's tools through the MCP protocol, in process: the official SDK's client
talks to :class:`~pigeond.agents.mcp_server.PigeonServer` over in-memory streams with the
initialize handshake, as Claude Code and Codex do over stdio."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client

from pigeond.agents.mcp_server import PigeonServer
from pigeond.agents.mcp_tools import Identity, Tools
from testkit.daemon_process import DaemonProcess


@dataclass(frozen=True, slots=True)
class ToolRun:
    is_error: bool
    text: str


def daemon_env(daemon: DaemonProcess) -> dict[str, str]:
    """pigeon-mcp's environment for a TCP test daemon: its URL and its token file."""
    return {"PIGEOND_URL": daemon.base_url, "PIGEOND_TOKEN_FILE": str(daemon.token_file)}


def call_tool(
    name: str, args: Mapping[str, Any], env: Mapping[str, str], session: str | None = "ses_mcpA"
) -> ToolRun:
    """One tool call, as a client sees it: its text and whether it is an error."""
    return call_tool_as(name, args, env, Identity(session))


def call_tool_as(
    name: str, args: Mapping[str, Any], env: Mapping[str, str], identity: Identity
) -> ToolRun:
    async def run() -> types.CallToolResult:
        server = PigeonServer(
            Tools(identity, env, system_socket="/nonexistent/pigeond.sock"), channel=False
        )
        async with Client(server, mode="legacy") as client:
            return await client.call_tool(name, dict(args))

    result = anyio.run(run)
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return ToolRun(bool(result.is_error), content.text)


def claude_member_calling(
    daemon: DaemonProcess, folder: Path, tool: str, args: Mapping[str, Any]
) -> str:
    """A Claude Code session known to ``daemon`` (its SessionStart hook named its transcript)
    whose transcript holds its model's call of pigeon-mcp's ``tool`` with ``args``, still in
    flight: the tool's requests for this session are the session's own
    (pigeond/api/authority.py).  Its session id."""
    session = str(uuid.uuid4())
    block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20],
             "name": f"mcp__pigeon__{tool}", "input": dict(args)}  # fmt: skip
    message = {"role": "assistant", "content": [block], "stop_reason": "tool_use"}
    entry = {"type": "assistant", "uuid": str(uuid.uuid4()), "sessionId": session,
             "message": message}  # fmt: skip
    transcript = folder / f"{session}.jsonl"
    transcript.write_text(json.dumps(entry) + "\n", encoding="utf-8")
    status, answer = daemon.request_json(
        "POST", "/swarm/agent/claude/event",
        {"event": "session_start", "session": session, "transcript_path": str(transcript)},
    )  # fmt: skip
    assert status == 200, answer
    return session


def listed_tools(env: Mapping[str, str]) -> list[types.Tool]:
    async def run() -> list[types.Tool]:
        server = PigeonServer(Tools(Identity(None), env), channel=False)
        async with Client(server, mode="legacy") as client:
            return (await client.list_tools()).tools

    return anyio.run(run)
