"""The HTTP side of the fake LLM (testkit/fake_llm.py): the routes opencode calls, and
one completion's answer, an SSE stream of ``chat.completion.chunk`` objects or a JSON
body.  Apart from the model's bookkeeping (what was asked, what is in flight), which
is :class:`~testkit.fake_llm.FakeLLM`'s: the server hands each parsed completion request
to the function it was made with.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any, cast

from testkit.stdlib_http import JsonHandler
from testkit.tool_script import ToolCall, stream_tool_call

MODEL_ID = "fake-model"
_COMPLETION_PATHS = ("/v1/chat/completions", "/chat/completions")
_MODELS_PATHS = ("/v1/models", "/models")


class CompletionHandler(JsonHandler):
    """One connection from opencode: the model list, a health check, or a completion
    request, parsed and handed to the server's :attr:`CompletionServer.answer`; quiet (the
    requests are recorded, not logged)."""

    protocol_version = "HTTP/1.1"
    server_version = "pigeond-fake-llm/1"
    server: CompletionServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in _MODELS_PATHS:
            now = int(time.time())
            model = {"id": MODEL_ID, "object": "model", "created": now, "owned_by": "fake"}
            self.send_json(200, {"object": "list", "data": [model]})
        elif path in ("", "/health"):
            self.send_json(200, {"ok": True})
        else:
            self.send_json(404, {"error": {"message": f"not found: {self.path}"}})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if path not in _COMPLETION_PATHS:
            self.send_json(404, {"error": {"message": f"not found: {self.path}"}})
            return
        try:
            request = json.loads(raw or b"{}")
        except ValueError as exc:
            self.send_json(400, {"error": {"message": f"bad json: {exc}"}})
            return
        if not isinstance(request, dict):
            self.send_json(400, {"error": {"message": "the body is not a JSON object"}})
            return
        self.server.answer(self, cast(dict[str, Any], request))

    def write_chunk(self, payload: object) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode("utf-8") + b"\n\n")
        self.wfile.flush()


class CompletionServer(ThreadingHTTPServer):
    """A thread per connection (two turns of a session may overlap); ``answer`` (set by its
    owner, :meth:`FakeLLM._complete`) answers one parsed completion request."""

    daemon_threads = True
    answer: Callable[[CompletionHandler, dict[str, Any]], None]


def json_reply(handler: CompletionHandler, reply: str) -> None:
    """One ``chat.completion`` JSON body with ``reply`` (a request without ``"stream"``)."""
    handler.send_json(
        200,
        {
            "id": "chatcmpl-" + uuid.uuid4().hex[:20],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": MODEL_ID,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
        },
    )


def stream_reply(
    handler: CompletionHandler, reply: str, delay: float, chunks: int, tool_call: ToolCall | None
) -> None:
    """The SSE answer: ``reply`` in ``chunks`` spread over ``delay`` seconds (or
    ``tool_call``), a last chunk with its ``finish_reason``, then ``[DONE]``."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.close_connection = True
    completion_id = "chatcmpl-" + uuid.uuid4().hex[:20]
    created = int(time.time())

    def chunk(
        delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None
    ) -> None:
        payload: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": MODEL_ID,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if usage is not None:
            payload["usage"] = usage
        handler.write_chunk(payload)

    if tool_call is not None:
        stream_tool_call(chunk, tool_call, lambda: time.sleep(delay / 3))
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()
        return
    words = reply.split(" ")
    per = -(-len(words) // chunks)
    pieces = [" ".join(words[i : i + per]) for i in range(0, len(words), per)]
    step = delay / (len(pieces) + 1)
    chunk({"role": "assistant", "content": ""})
    for index, piece in enumerate(pieces):
        time.sleep(step)
        chunk({"content": piece if index == 0 else " " + piece})
    time.sleep(step)
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": len(words),
        "total_tokens": 10 + len(words),
    }
    chunk({}, finish="stop", usage=usage)
    handler.wfile.write(b"data: [DONE]\n\n")
    handler.wfile.flush()
