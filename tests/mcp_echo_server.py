"""A minimal MCP server over stdio with one tool, ``echo``, for recording real transcripts.

``echo {"text": T}`` answers T as its text content: a test makes a tool result say what
it wants (an envelope quoted by a tool, say).  Newline-delimited JSON-RPC 2.0, as
Claude Code speaks to stdio servers; stdlib only.  Run as
``python -m tests.mcp_echo_server`` (or by its path).
"""

from __future__ import annotations

import json
import sys
from typing import Any

TOOL = {
    "name": "echo",
    "description": "Answer the given text.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
}


def answer(request: dict[str, Any]) -> dict[str, Any] | None:
    """The response to one JSON-RPC request; None for a notification."""
    method = request.get("method")
    if "id" not in request:
        return None
    result: dict[str, Any]
    if method == "initialize":
        params = request.get("params") or {}
        result = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "echo", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        arguments = (request.get("params") or {}).get("arguments") or {}
        result = {"content": [{"type": "text", "text": str(arguments.get("text", ""))}]}
    else:
        error = {"code": -32601, "message": f"no method {method}"}
        return {"jsonrpc": "2.0", "id": request["id"], "error": error}
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def main() -> None:
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        response = answer(request) if isinstance(request, dict) else None
        if response is not None:
            sys.stdout.write(json.dumps(response) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
