"""A scripted OpenAI Responses API (``POST /v1/responses``, streamed) for real Codex runs,
on 127.0.0.1 and a port of its own (port 0).  Stdlib only.

The script: when the last user text holds ``CALLTOOL <name> <json>``, it answers a
function call of that tool (``mcp__<server>__<tool>`` is sent as Codex expects an MCP
tool: name ``<tool>``, namespace ``mcp__<server>``); after a tool's output it answers
``tool said: <output>``; else ``ok: <the first 40 characters>``.  Every request body is
kept (:attr:`FakeOpenAI.requests`), so a test reads what Codex sent back.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from typing import Any

from testkit.stdlib_http import JsonHandler

CALL_RE = re.compile(r"CALLTOOL (\S+) (\{.*\})", re.S)


def _texts(item: dict[str, Any]) -> list[str]:
    content = item.get("content")
    if isinstance(content, str):
        return [content]
    return [p.get("text", "") for p in content or [] if isinstance(p, dict) and "text" in p]


def plan(body: dict[str, Any]) -> tuple[str, str, str]:
    """("text", answer, "") or ("call", tool, arguments JSON) for one request."""
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    last = items[-1] if items else {}
    if last.get("type") == "function_call_output":
        out = last.get("output")
        return "text", "tool said: " + (out if isinstance(out, str) else json.dumps(out)), ""
    users = [i for i in items if i.get("role") == "user"]
    text = " ".join(_texts(users[-1])) if users else ""
    match = CALL_RE.search(text)
    if match:
        return "call", match.group(1), match.group(2)
    return "text", "ok: " + text.strip()[:40], ""


class _Handler(JsonHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        body = json.loads(self.read_body() or b"{}")
        with self.server.lock:
            self.server.requests.append(body)
        if not self.path.split("?")[0].endswith("/responses"):
            self.send_json(404, {"error": {"message": "not found"}})
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        rid = "resp_" + uuid.uuid4().hex[:16]

        def event(name: str, data: dict[str, Any]) -> None:
            data["type"] = name
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        event("response.created", {"response": {"id": rid, "status": "in_progress"}})
        kind, first, second = plan(body)
        if kind == "text":
            item: dict[str, Any] = {
                "type": "message", "id": "msg_" + uuid.uuid4().hex[:12], "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": first, "annotations": []}],
            }  # fmt: skip
            event("response.output_item.added", {"output_index": 0, "item": item})
            event(
                "response.output_text.delta",
                {"output_index": 0, "content_index": 0, "item_id": item["id"], "delta": first},
            )
        else:
            item = {
                "type": "function_call", "id": "fc_" + uuid.uuid4().hex[:12],
                "call_id": "call_" + uuid.uuid4().hex[:12], "name": first, "arguments": second,
                "status": "completed",
            }  # fmt: skip
            if first.startswith("mcp__") and first.count("__") >= 2:
                namespace, _, tool = first.rpartition("__")
                item["name"], item["namespace"] = tool, namespace
            event("response.output_item.added", {"output_index": 0, "item": item})
        event("response.output_item.done", {"output_index": 0, "item": item})
        usage = {
            "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15,
        }  # fmt: skip
        event(
            "response.completed", {"response": {"id": rid, "status": "completed", "usage": usage}}
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []


class FakeOpenAI:
    def __init__(self, server: _Server) -> None:
        self._server = server

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._server.lock:
            return list(self._server.requests)


@contextmanager
def running_fake_openai() -> Iterator[FakeOpenAI]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, name="fake-openai", daemon=True)
    thread.start()
    try:
        yield FakeOpenAI(server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
