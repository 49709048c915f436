"""A small stdlib HTTP server on 127.0.0.1 standing in for the daemon in the CLI tests,
which talk to it over real HTTP (the CLIs load no Twisted)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """A handler that answers JSON and logs nothing."""

    def send_json(self, status: int, body: Any) -> None:
        self.send_bytes(status, json.dumps(body).encode())

    def send_bytes(self, status: int, data: bytes) -> None:
        """``data`` as the body of a JSON answer (raw, so a test can answer garbage)."""
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on a free port of 127.0.0.1 until the block ends; its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
