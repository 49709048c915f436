"""An in-memory opencode for a daemon on a ``Clock``: a Resource served through StubTreq.

(``tests/fake_opencode.py`` is the other stand-in: a real HTTP server for subprocesses.)
"""

from __future__ import annotations

import json
from pathlib import Path

from twisted.web import server
from twisted.web.resource import Resource


class RecordingOpencode(Resource):
    """Knows one session; records every request's path and Authorization header."""

    isLeaf = True

    def __init__(self, directory: Path, prompt_status: int = 204) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.directory = str(directory)
        self.prompt_status = prompt_status
        self.seen: list[tuple[str, str | None]] = []

    def render(self, request: server.Request) -> bytes:
        auth = request.getHeader("authorization")
        self.seen.append(((request.path or b"").decode(), auth))
        if request.method == b"GET":
            return json.dumps({"id": "ses_t", "directory": self.directory}).encode()
        request.setResponseCode(self.prompt_status)
        return b""
