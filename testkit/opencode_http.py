"""HTTP to ``opencode serve`` as the tests speak it: one blocking request, or an SSE
stream read in a thread, on 127.0.0.1 with ``http.client`` (no reactor).  Apart from
testkit/opencode_server.py, which starts opencode and calls its routes through these.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, cast


class OpencodeError(RuntimeError):
    """opencode did not start, answered unexpectedly, or did not become idle."""


@dataclass(frozen=True, slots=True)
class Response:
    """One HTTP answer from opencode."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def http_request(
    port: int,
    method: str,
    path: str,
    body: object = None,
    *,
    directory: str | None,
    timeout_s: float,
) -> Response:
    """One request to opencode on ``port``; ``directory`` goes in ``x-opencode-directory``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        headers: dict[str, str] = {}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["content-type"] = "application/json"
        if directory is not None:
            headers["x-opencode-directory"] = directory
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        return Response(
            response.status,
            {k.lower(): v for k, v in response.getheaders()},
            response.read(),
        )
    finally:
        conn.close()


@dataclass(slots=True)
class Event:
    """One SSE ``data:`` object, with the test clock's time it arrived."""

    at: float
    data: dict[str, Any]

    @property
    def payload(self) -> dict[str, Any]:
        """The event itself (``/global/event`` wraps it in ``{"directory", "payload"}``)."""
        inner = self.data.get("payload")
        return cast(dict[str, Any], inner) if isinstance(inner, dict) else self.data

    @property
    def type(self) -> str:
        return str(self.payload.get("type"))

    @property
    def properties(self) -> dict[str, Any]:
        props = self.payload.get("properties")
        return cast(dict[str, Any], props) if isinstance(props, dict) else {}


class EventRecorder:
    """Reads an SSE stream (``/global/event`` or ``/event``) in a thread.

    Use :meth:`OpencodeServer.record_events`, which starts and closes it.
    """

    def __init__(self, port: int, path: str, directory: str | None) -> None:
        self.port = port
        self.path = path
        self.directory = directory
        self.error: str | None = None
        self._events: list[Event] = []
        self._conn: http.client.HTTPConnection | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._closing = False

    def start(self, timeout_s: float = 10.0) -> None:
        self._thread = threading.Thread(target=self._run, name="opencode-events", daemon=True)
        self._thread.start()
        if not self._connected.wait(timeout_s):
            raise OpencodeError(f"GET {self.path} did not answer within {timeout_s:g} s")
        if self.error is not None:
            raise OpencodeError(f"GET {self.path}: {self.error}")

    def _run(self) -> None:
        # A read timeout well above opencode's heartbeat (10-15 s) ends a stuck stream.
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        self._conn = conn
        try:
            headers = {"accept": "text/event-stream"}
            if self.directory is not None:
                headers["x-opencode-directory"] = self.directory
            conn.request("GET", self.path, headers=headers)
            response = conn.getresponse()
            if response.status != 200:
                self.error = f"HTTP {response.status}"
                return
            self._connected.set()
            for _ in range(1_000_000):
                line = response.readline()
                if not line:
                    break
                if line.startswith(b"data:"):
                    try:
                        data = json.loads(line[5:].strip())
                    except ValueError:
                        continue
                    if isinstance(data, dict):
                        with self._lock:
                            self._events.append(Event(time.monotonic(), data))
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if not self._closing:
                self.error = repr(exc)
        finally:
            self._connected.set()
            conn.close()

    def snapshot(self) -> list[Event]:
        """Every event received so far, in order."""
        with self._lock:
            return list(self._events)

    def of_type(self, event_type: str, session_id: str | None = None) -> list[Event]:
        """The events of one type (for one session, when given) received so far."""
        return [
            e
            for e in self.snapshot()
            if e.type == event_type
            and (session_id is None or e.properties.get("sessionID") == session_id)
        ]

    def wait_for(self, event_type: str, session_id: str | None, timeout_s: float) -> list[Event]:
        """Wait until at least one such event arrived; returns them (OpencodeError on timeout)."""
        deadline = time.monotonic() + timeout_s
        while not (found := self.of_type(event_type, session_id)):
            if time.monotonic() >= deadline:
                raise OpencodeError(
                    f"no {event_type} event for {session_id} on {self.path} within "
                    f"{timeout_s:g} s (error: {self.error}, {len(self.snapshot())} events)"
                )
            time.sleep(0.05)
        return found

    def close(self) -> None:
        self._closing = True
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
