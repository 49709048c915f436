"""HTTP over a Unix socket, as ``pigeon-send --url unix:PATH`` speaks it.

Standard library only: ``test_access_process`` copies this file beside a socket and runs
it as another user, with the system's Python.
"""

from __future__ import annotations

import http.client
import socket
from pathlib import Path


class UnixHTTPConnection(http.client.HTTPConnection):
    """An ``http.client`` connection over the AF_UNIX stream socket at ``path``."""

    def __init__(self, path: str | Path, timeout: float = 10.0) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def unix_get(path: str | Path, target: str = "/", timeout_s: float = 5.0) -> bytes:
    """A blocking HTTP/1.0 ``GET target`` over the socket at ``path``: the whole answer,
    status line and headers included, as the server wrote it."""
    connection = UnixHTTPConnection(path, timeout_s)
    connection.connect()
    try:
        sock = connection.sock
        sock.sendall(f"GET {target} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        return answer
    finally:
        connection.close()
