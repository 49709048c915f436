"""A stand-in for pigeond's agent routes (``/swarm/agent/...``) on a Unix socket.

``pigeon-hook`` is tested against it: each request is recorded, and answered with what the
test set (:meth:`AgentRoutesStandIn.answer`, raw bytes so a test can answer garbage;
:meth:`AgentRoutesStandIn.answer_once` for the next request only); while
:meth:`AgentRoutesStandIn.holding` is on, answers wait until it ends (a daemon slower than
the hook's bound).  Stdlib only; serves from daemon
threads; the socket lives in a short private folder (a Unix socket path has ~108 bytes).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socketserver
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.stdlib_http import JsonHandler

HOLD_LIMIT_S = 60.0  # a held answer is sent after this at the latest (a test that failed)
NOTHING_WAITING = json.dumps({"text": None, "msg_ids": []}).encode()


@dataclass(frozen=True, slots=True)
class Seen:
    method: str
    path: str
    body: Any


class _Handler(JsonHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        standin = self.server.standin
        raw = self.read_body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw
        standin.record(Seen("POST", self.path, body))
        standin.released.wait(HOLD_LIMIT_S)
        with contextlib.suppress(OSError):  # the hook may have given up and gone
            self.send_bytes(standin.status, standin.next_body())


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    standin: AgentRoutesStandIn


class AgentRoutesStandIn:
    """Serves on :attr:`socket_path` (``url`` is its ``unix:`` URL) until :meth:`close`."""

    def __init__(self) -> None:
        self.status = 200
        self.body = NOTHING_WAITING
        self.released = threading.Event()
        self.released.set()
        self._seen: list[Seen] = []
        self._once: list[bytes] = []
        self._lock = threading.Lock()
        self._folder = Path(tempfile.mkdtemp(prefix="pgh-"))
        self.socket_path = self._folder / "pigeond.sock"
        self._server = _Server(str(self.socket_path), _Handler)
        self._server.standin = self
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"unix:{self.socket_path}"

    def answer_once(self, body: Any) -> None:
        """Answer ``body`` (JSON-encoded) with 200 to the next request, then as before."""
        with self._lock:
            self._once.append(json.dumps(body).encode())

    def next_body(self) -> bytes:
        with self._lock:
            return self._once.pop(0) if self._once else self.body

    def answer(self, body: Any, status: int = 200) -> None:
        """Answer ``body`` (JSON-encoded unless bytes) with ``status`` from now on."""
        self.status = status
        self.body = body if isinstance(body, bytes) else json.dumps(body).encode()

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Answers wait until the block ends."""
        self.released.clear()
        try:
            yield
        finally:
            self.released.set()

    def record(self, seen: Seen) -> None:
        with self._lock:
            self._seen.append(seen)

    @property
    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def close(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        shutil.rmtree(self._folder, ignore_errors=True)
