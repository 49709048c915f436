"""A fake ``opencode serve`` for integration tests, on a real socket.

It speaks the two calls pigeond makes (see ``pigeond/delivery/opencode_client.py``):

* ``GET /session/<id>`` answers 200 ``{"id": ..., "directory": ...}`` for a
  registered session and 404 (opencode's ``NotFoundError`` shape) otherwise;
* ``POST /session/<id>/prompt_async`` holds every call for ``hold_s`` seconds
  (100 ms by default; cut short when the fake stops) and answers 204, like
  opencode does once it has queued the prompt; an unknown session gets 404.

Every prompt_async call to a known session is counted as it arrives, before its hold
(:meth:`FakeOpencode.arrivals`): a test waits on that to know a prompt is being held.
Once answered, it is recorded as a :class:`PromptCall` with its
session, its start and end (``time.monotonic()``, the same clock as the test
process), the ``x-opencode-directory`` header and the parsed JSON body.  The
server is a :class:`~http.server.ThreadingHTTPServer`, so calls are served
concurrently: two overlapping prompts to one session show up as two records
whose intervals overlap, which is exactly what the per-target guard in the
arbiter must prevent.

Each registered session gets its own directory under the root given to the
constructor (never the test process's cwd), so a test can check that pigeond
passes the directory opencode reported, not one of its own.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

_SESSION_PATH_RE = re.compile(r"^/session/([^/?#]+)$")
_PROMPT_PATH_RE = re.compile(r"^/session/([^/?#]+)/prompt_async$")
_MESSAGES_PATH_RE = re.compile(r"^/session/([^/?#]+)/message(?:\?.*)?$")
_ENVELOPE_ATTR_RE = re.compile(r'([a-z_]+)="([^"]*)"')
_ENVELOPE_OPEN_RE = re.compile(r"^<swarm_message ([^>]*)>\n")


@dataclass(frozen=True, slots=True)
class PromptCall:
    """One ``POST /session/<id>/prompt_async`` the fake answered."""

    session: str
    start: float
    """``time.monotonic()`` when the request's headers had been read."""
    end: float
    """``time.monotonic()`` just before the answer was written."""
    directory: str | None
    """The ``x-opencode-directory`` header, or None when it was missing."""
    body: Any
    """The request body, parsed as JSON (None if it was not valid JSON)."""
    status: int
    """The status the fake answered: 204, or 404 for an unknown session."""

    @property
    def text(self) -> str:
        """The text of the first part: the ``<swarm_message>`` envelope pigeond sent."""
        parts = self.body["parts"] if isinstance(self.body, dict) else None
        if not isinstance(parts, list) or not parts or not isinstance(parts[0], dict):
            raise AssertionError(f"prompt_async body has no parts: {self.body!r}")
        text = parts[0].get("text")
        if not isinstance(text, str):
            raise AssertionError(f"prompt_async part has no text: {self.body!r}")
        return text

    @property
    def envelope_attributes(self) -> dict[str, str]:
        """The attributes of the envelope's opening tag, still escaped."""
        match = _ENVELOPE_OPEN_RE.match(self.text)
        if match is None:
            raise AssertionError(f"prompt text is not a swarm envelope: {self.text!r}")
        return dict(_ENVELOPE_ATTR_RE.findall(match.group(1)))

    @property
    def msg_id(self) -> str:
        """The ``msg_id`` attribute of the envelope."""
        return self.envelope_attributes["msg_id"]

    def overlaps(self, other: PromptCall) -> bool:
        """True when the two calls were being served at the same time."""
        return self.start < other.end and other.start < self.end


class _Server(ThreadingHTTPServer):
    """The HTTP server, with a back-reference to its fake and its open connections."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, fake: FakeOpencode, port: int = 0) -> None:
        self.fake = fake
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Wake every handler thread blocked on a kept-alive connection."""
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    # opencode (Bun) keeps connections alive; so does pigeond's client pool.
    protocol_version = "HTTP/1.1"
    # an idle kept-alive connection is dropped after this many seconds
    timeout = 10

    @property
    def fake(self) -> FakeOpencode:
        return cast(_Server, self.server).fake

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request log on stderr."""

    def _send_json(self, status: int, body: dict[str, Any] | list[Any]) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self, session: str) -> None:
        self._send_json(
            404,
            {"name": "NotFoundError", "data": {"message": f"Session not found: {session}"}},
        )

    def _read_body(self) -> bytes:
        length = self.headers.get("content-length")
        if length is None:
            return b""
        return self.rfile.read(int(length))

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/session/status":
            self._send_json(200, {})  # no turns run here: nobody is ever busy
            return
        messages = _MESSAGES_PATH_RE.match(self.path)
        if messages is not None:
            self._send_transcript(messages.group(1))
            return
        match = _SESSION_PATH_RE.match(self.path)
        if match is None:
            self._send_json(404, {"name": "NotFoundError", "data": {"message": "no such route"}})
            return
        session = match.group(1)
        self.fake._record_lookup(session)
        directory = self.fake.directory_of(session)
        if directory is None:
            self._not_found(session)
            return
        self._send_json(200, {"id": session, "directory": str(directory)})

    def _send_transcript(self, session: str) -> None:
        """``GET /session/<id>/message``: one user message per accepted prompt."""
        if self.fake.directory_of(session) is None:
            self._not_found(session)
            return
        transcript = [
            {
                "info": {"role": "user", "sessionID": session},
                "parts": [part for part in (call.body or {}).get("parts", [])],
            }
            for call in self.fake.prompt_calls()
            if call.session == session and call.status == 204
        ]
        self._send_json(200, transcript)

    def do_POST(self) -> None:
        start = time.monotonic()
        match = _PROMPT_PATH_RE.match(self.path)
        if match is None:
            self._read_body()
            self._send_json(404, {"name": "NotFoundError", "data": {"message": "no such route"}})
            return
        session = match.group(1)
        raw = self._read_body()
        try:
            body: Any = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            body = None
        known = self.fake.directory_of(session) is not None
        if known:
            self.fake._record_arrival(session)
            self.fake._stopped.wait(self.fake.hold_s)
        status = 204 if known else 404
        self.fake._record_prompt(
            PromptCall(
                session=session,
                start=start,
                end=time.monotonic(),
                directory=self.headers.get("x-opencode-directory"),
                body=body,
                status=status,
            )
        )
        if known:
            self.send_response(204)
            self.end_headers()
        else:
            self._not_found(session)


class FakeOpencode:
    """A fake opencode server on ``127.0.0.1`` and a free port, run in a background thread.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.  Every
    method is safe to call from any thread.
    """

    def __init__(self, root: Path, *, hold_s: float = 0.1) -> None:
        """``root``: where the per-session directories are created.
        ``hold_s``: how long each prompt_async call is held before its 204."""
        self.root = root
        self.hold_s = hold_s
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._sessions: dict[str, Path] = {}
        self._prompts: list[PromptCall] = []
        self._lookups: list[str] = []
        self._arrivals: list[str] = []
        # set by stop(): a prompt still held is answered at once
        self._stopped = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self, port: int = 0) -> None:
        """Bind ``port`` (a free one when 0) on 127.0.0.1 and serve in a daemon thread; the
        port of an earlier :meth:`stop` starts it again where pigeond expects it."""
        if self._server is not None:
            raise RuntimeError("the fake opencode is already running")
        self._stopped.clear()
        server = _Server(self, port)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-opencode",
            daemon=True,
        )
        thread.start()
        self._server, self._thread = server, thread

    def stop(self) -> None:
        """Stop serving, close the port and every open connection; idempotent."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        self._stopped.set()
        server.shutdown()
        server.server_close()
        server.close_connections()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> FakeOpencode:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the fake opencode is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL to pass as pigeond's ``--opencode-url``."""
        return f"http://127.0.0.1:{self.port}"

    # -- sessions ------------------------------------------------------------

    def add_session(self, session_id: str) -> Path:
        """Register a session; returns (and creates) the directory opencode reports for it."""
        directory = self.root / "sessions" / session_id
        directory.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._sessions[session_id] = directory
        return directory

    def remove_session(self, session_id: str) -> None:
        """Forget a session, as opencode does once it is deleted (its lookups get 404)."""
        with self._lock:
            self._sessions.pop(session_id, None)

    def directory_of(self, session_id: str) -> Path | None:
        """The session's directory, or None for an unknown session."""
        with self._lock:
            return self._sessions.get(session_id)

    # -- records ---------------------------------------------------------------

    def _record_prompt(self, call: PromptCall) -> None:
        with self._changed:
            self._prompts.append(call)
            self._changed.notify_all()

    def _record_arrival(self, session_id: str) -> None:
        with self._lock:
            self._arrivals.append(session_id)

    def _record_lookup(self, session_id: str) -> None:
        with self._lock:
            self._lookups.append(session_id)

    def prompt_calls(self, session: str | None = None) -> list[PromptCall]:
        """A copy of the prompt_async calls answered so far, in the order they ended."""
        with self._lock:
            calls = list(self._prompts)
        return calls if session is None else [c for c in calls if c.session == session]

    def arrivals(self, session: str | None = None) -> list[str]:
        """The session ids of the prompt_async calls to known sessions that have arrived
        (their body read), answered or still held, in order."""
        with self._lock:
            arrived = list(self._arrivals)
        return arrived if session is None else [s for s in arrived if s == session]

    def lookups(self) -> list[str]:
        """The session ids of every ``GET /session/<id>`` so far, in order."""
        with self._lock:
            return list(self._lookups)

    def wait_for_prompts(
        self, done: Callable[[list[PromptCall]], bool], timeout_s: float
    ) -> list[PromptCall]:
        """Block until ``done(calls)`` is true for the calls so far; AssertionError on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                calls = list(self._prompts)
                if done(calls):
                    return calls
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"fake opencode: condition not met within {timeout_s:g} s;"
                        f" {len(calls)} prompt_async call(s) so far:"
                        f" {[(c.session, c.status) for c in calls]}"
                    )
                self._changed.wait(timeout=min(remaining, 0.1))
