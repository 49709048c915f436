"""A loopback server that accepts every connection, reads what comes, and never answers:
an ``opencode serve`` whose requests hang (measurements 5 and 7 of issue 27).

It runs in its own threads on a real listening port, so the daemon under test talks to it
over real sockets; :meth:`HangingServer.open_requests` says which request lines arrived on
connections still open (each connection here carries one request: nothing answers it).
Stopping it closes every connection it holds.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable


def _content_length(head: bytes) -> int:
    for header in head.split(b"\r\n")[1:]:
        name, _, value = header.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


def json_answer(status: int, body: object) -> bytes:
    """A whole HTTP/1.1 answer with a JSON body (kept alive)."""
    data = b"" if status == 204 else json.dumps(body).encode()
    reason = {200: "OK", 204: "No Content", 404: "Not Found"}.get(status, "Answer")
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
    return (head + f"content-length: {len(data)}\r\n\r\n").encode() + data


class HangingServer:
    """Listens on 127.0.0.1 (a free port), holds every request without an answer, except
    those ``answer`` returns a whole HTTP response for (bytes), which it writes."""

    def __init__(self, answer: Callable[[str], bytes | None] = lambda line: None) -> None:
        self._answer = answer
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self._lock = threading.Lock()
        self._open: dict[socket.socket, list[str]] = {}
        self.request_lines: list[str] = []  # every request line that arrived, in order
        self._stopped = False
        threading.Thread(target=self._accept, name="hanging-server", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def open_requests(self, prefix: str = "") -> list[str]:
        """The request lines (``GET /session/x HTTP/1.1``) starting with ``prefix`` that
        are held on connections still open."""
        with self._lock:
            return [
                line for lines in self._open.values() for line in lines if line.startswith(prefix)
            ]

    def _accept(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._open[conn] = []
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        buffer = b""
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                data = b""
            if not data:
                with self._lock:
                    self._open.pop(conn, None)
                conn.close()
                return
            buffer += data
            while b"\r\n\r\n" in buffer:
                head, rest = buffer.split(b"\r\n\r\n", 1)
                length = _content_length(head)
                if len(rest) < length:
                    break  # the body is still coming
                buffer = rest[length:]
                line = head.split(b"\r\n", 1)[0].decode("latin-1")
                with self._lock:
                    self.request_lines.append(line)
                answer = self._answer(line)
                if answer is not None:
                    conn.sendall(answer)
                else:
                    with self._lock:
                        if conn in self._open:
                            self._open[conn].append(line)

    def stop(self) -> None:
        self._stopped = True
        self._listener.close()
        with self._lock:
            conns = list(self._open)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> HangingServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
