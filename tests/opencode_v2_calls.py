"""Calling the opencode 2.x stand-in (:mod:`testkit.opencode_v2_standin`) from a test:
one JSON request with HTTP Basic and what it answered, or its event stream read raw."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from testkit.opencode_v2_session import StandInSession
from testkit.opencode_v2_standin import USER, OpencodeV2StandIn
from testkit.polling import PATIENCE_S, wait_until

PASSWORD = "stand-in-secret"
TIMEOUT_S = 70.0  # above the stand-in's own bound on a wait


@contextlib.contextmanager
def running(step_s: float = 0.05, **options: Any) -> Iterator[tuple[str, StandInSession]]:
    """A stand-in served on loopback with one session; its URL and that session."""
    standin = OpencodeV2StandIn(PASSWORD, step_s=step_s, **options)
    with standin.serve() as url:
        status, created = call(url, "POST", "/api/session", {})
        assert status == 200, created
        yield url, standin.sessions[created["data"]["id"]]


def wait_idle(url: str, session: StandInSession) -> None:
    status, _ = call(url, "POST", f"/api/session/{session.id}/wait")
    assert status == 204


def call(
    url: str, method: str, path: str, body: Any = None, password: str | None = PASSWORD
) -> tuple[int, Any]:
    """``method path`` with ``body`` as JSON; the status and the parsed answer (None when
    empty).  ``password=None`` sends no credentials."""
    headers = {"content-type": "application/json"}
    if password is not None:
        token = base64.b64encode(f"{USER}:{password}".encode()).decode()
        headers["authorization"] = f"Basic {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    return status, json.loads(raw) if raw else None


def prompt(url: str, session: str, text: str, delivery: str = "queue", **extra: Any) -> Any:
    """Admit ``text`` (the SDK's nested shape); the receipt, or AssertionError."""
    body = {"prompt": {"text": text}, "delivery": delivery, **extra}
    status, answer = call(url, "POST", f"/api/session/{session}/prompt", body)
    assert status == 200, (status, answer)
    return answer["data"]


def open_events(url: str) -> socket.socket:
    """A connection to ``/api/event`` with a small receive buffer, once the server has
    begun answering it (it subscribes the reader before it answers)."""
    address = urlsplit(url)
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.settimeout(PATIENCE_S)
    reader.connect((address.hostname or "127.0.0.1", address.port or 80))
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    reader.sendall(f"GET /api/event HTTP/1.1\r\nauthorization: Basic {token}\r\n\r\n".encode())
    wait_until(lambda: reader.recv(1, socket.MSG_PEEK), PATIENCE_S, "the event stream")
    return reader


def read_events(reader: socket.socket, count: int | None = None) -> list[dict[str, Any]]:
    """The whole events read until the stream ends (or the first ``count``); the reader
    is closed."""
    data = b""
    with reader:
        while count is None or len(_events(data)) < count:
            chunk = reader.recv(65536)
            if not chunk:
                break
            data += chunk
    return _events(data)[:count]


def _events(data: bytes) -> list[dict[str, Any]]:
    """The complete ``data:`` events of a raw SSE answer (headers and all)."""
    body = data.partition(b"\r\n\r\n")[2]
    blocks = body.split(b"\n\n")[:-1]  # the last one is not complete yet
    return [json.loads(b[6:]) for b in blocks if b.startswith(b"data: ")]
