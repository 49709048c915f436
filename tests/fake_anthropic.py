"""A scripted fake of Anthropic's Messages API, for the real Claude Code offline.

Claude Code is pointed at it with ``ANTHROPIC_BASE_URL`` (see :mod:`tests.claude_code`).
It first sends ``HEAD /`` (a 404 is fine), then ``POST /v1/messages?beta=true`` with
``"stream": true``; it may also call ``POST /v1/messages/count_tokens``.

The script, over the last user message (``{"role": "system", ...}`` items that Claude
Code places after it are skipped, and so are text blocks that start with
``<system-reminder>``):

* ``CALLTOOL <name> <json>`` in its text, and it is not already a tool result: answer a
  ``tool_use`` block calling ``<name>`` with the JSON object as input;
* a tool result: answer ``tool said: <its text>`` (first 200 characters);
* else: answer ``ok: <first 40 characters of its last text>``.

A Stop hook's blocking reason reaches the model inside a ``<system-reminder>`` (Claude Code
2.1.332: ``<system-reminder>\n<lead>\nStop hook feedback:\n<reason>\n</system-reminder>``);
the script reads the reason as that message's text.

Every request is recorded (:attr:`FakeAnthropic.requests`, and one JSON line each in
``log_path`` when given) so a test can read what the model was shown.

Stdlib only; binds 127.0.0.1 on a free port; serves from daemon threads.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CALLTOOL_RE = re.compile(r"CALLTOOL (\S+) (\{.*\})", re.S)
SYSTEM_REMINDER = "<system-reminder>"
REMINDER_END = "</system-reminder>"
STOP_FEEDBACK = "Stop hook feedback:\n"
_USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}


@dataclass(frozen=True, slots=True)
class Request:
    """One request the fake answered."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.time)


def block_texts(content: Any) -> list[str]:
    """Every text in a message content (a string or a list of blocks), tool results' too."""
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            out.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            out.extend(block_texts(inner) if isinstance(inner, list) else [str(inner)])
    return out


def last_user_message(messages: list[Any]) -> dict[str, Any]:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return message
    return {"content": ""}


def user_texts(message: dict[str, Any]) -> list[str]:
    """The message's texts without Claude Code's ``<system-reminder>`` blocks, except a Stop
    hook's feedback: Claude Code 2.1.332 wraps it in one (after a lead that tells the model
    a hook relays data), and only the text after ``Stop hook feedback:`` is kept."""
    out = []
    for text in block_texts(message.get("content")):
        if not text.startswith(SYSTEM_REMINDER):
            out.append(text)
        elif STOP_FEEDBACK in text:
            feedback = text.split(STOP_FEEDBACK, 1)[1]
            out.append(feedback.removesuffix(REMINDER_END).strip("\n"))
    return out


def plan(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The content blocks to answer ``body`` with, and the stop reason."""
    messages = body.get("messages")
    last = last_user_message(messages if isinstance(messages, list) else [])
    content = last.get("content")
    results = [
        b
        for b in (content if isinstance(content, list) else [])
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    texts = user_texts(last)
    call = CALLTOOL_RE.search(" ".join(texts).strip())
    if call is not None and not results:
        try:
            arguments = json.loads(call.group(2))
        except ValueError:
            arguments = {}
        tool_use = {
            "type": "tool_use",
            "id": "toolu_" + uuid.uuid4().hex[:20],
            "name": call.group(1),
            "input": arguments if isinstance(arguments, dict) else {},
        }
        return [tool_use], "tool_use"
    if results:
        text = "tool said: " + " | ".join(block_texts([results[0]]))[:200]
    else:
        text = "ok: " + (texts[-1] if texts else "")[:40]
    return [{"type": "text", "text": text}], "end_turn"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, obj: object) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        self.server.fake.record(Request(self.command, self.path, dict(self.headers), None))
        error = {"type": "not_found_error", "message": "not faked"}
        self._json(404, {"type": "error", "error": error})

    do_GET = do_HEAD = do_PUT = do_DELETE = _not_found

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        self.server.fake.record(Request("POST", self.path, dict(self.headers), body))
        path = self.path.split("?")[0]
        if path == "/v1/messages/count_tokens":
            self._json(200, {"input_tokens": len(raw) // 4})
        elif path != "/v1/messages" or not isinstance(body, dict):
            self._not_found()
        else:
            self._answer(body)

    def _answer(self, body: dict[str, Any]) -> None:
        blocks, stop = plan(body)
        model = body.get("model", "claude-fake")
        message_id = "msg_" + uuid.uuid4().hex[:20]
        if not body.get("stream"):
            message = {"id": message_id, "type": "message", "role": "assistant", "model": model}
            message |= {"content": blocks, "stop_reason": stop, "stop_sequence": None}
            self._json(200, message | {"usage": _USAGE})
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        start = {"id": message_id, "type": "message", "role": "assistant", "model": model}
        start |= {"content": [], "stop_reason": None, "stop_sequence": None, "usage": _USAGE}
        self._event("message_start", {"message": start})
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                opened: dict[str, Any] = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                opened = {k: block[k] for k in ("type", "id", "name")} | {"input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            self._event("content_block_start", {"index": index, "content_block": opened})
            self._event("content_block_delta", {"index": index, "delta": delta})
            self._event("content_block_stop", {"index": index})
        delta_end = {"stop_reason": stop, "stop_sequence": None}
        self._event("message_delta", {"delta": delta_end, "usage": {"output_tokens": 5}})
        self._event("message_stop", {})

    def _event(self, name: str, data: dict[str, Any]) -> None:
        payload = json.dumps({"type": name} | data)
        self.wfile.write(f"event: {name}\ndata: {payload}\n\n".encode())
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeAnthropic


class FakeAnthropic:
    """The fake, serving on 127.0.0.1 from :meth:`start` to :meth:`close`."""

    def __init__(self, log_path: Path | None = None) -> None:
        self.log_path = log_path
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> FakeAnthropic:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the fake is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)
            if self.log_path is not None:
                with open(self.log_path, "a", encoding="utf-8") as log:
                    log.write(json.dumps(dataclasses.asdict(request)) + "\n")

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def model_calls(self) -> list[dict[str, Any]]:
        """The bodies of the ``POST /v1/messages`` requests, oldest first."""
        return [
            r.body
            for r in self.requests
            if r.method == "POST" and r.path.split("?")[0] == "/v1/messages"
        ]

    def last_user_texts(self) -> list[list[str]]:
        """For each model call, the texts of its last user message (reminders left out)."""
        out = []
        for body in self.model_calls():
            messages = body.get("messages")
            listed = messages if isinstance(messages, list) else []
            out.append(user_texts(last_user_message(listed)))
        return out
