"""An in-memory opencode for a daemon on a ``Clock``: a Resource served through StubTreq.

(``testkit/fake_opencode.py`` is the other stand-in: a real HTTP server for subprocesses.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from treq.client import HTTPClient
from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionRefusedError
from twisted.web import server
from twisted.web.resource import Resource

from tests.http_helpers import stub_client


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


class SwitchableOpencode:
    """treq's in-memory client to ``resource``, as an opencode that can be stopped: while
    ``up`` is False every request fails as one to a closed port does (connection refused),
    and is counted in ``refused``."""

    def __init__(self, resource: Resource) -> None:
        self._stub = stub_client(resource)
        self.up = True
        self.refused = 0

    def request(self, method: str, url: str, **kwargs: Any) -> Deferred[Any]:
        if not self.up:
            self.refused += 1
            return fail(ConnectionRefusedError())
        answer: Deferred[Any] = self._stub.request(method, url, **kwargs)
        return answer

    def as_http(self) -> HTTPClient:
        """This, typed as the client the daemon takes."""
        return cast(HTTPClient, self)
