"""A stand-in for an opencode whose v1 routes are gone: it serves only ``/api/*``.

Any other path gets what a server without the v1 routes answers, as measured on
opencode 1.15.4 and 1.18.33 for paths they have no route for:

* ``"web app"``: 200 ``text/html``, opencode's web app (GET and POST alike);
* ``"404"``: a plain 404, as a server without that fallback answers.

In both, ``/api/*`` answers ``{"data": []}``: no 2.x's health, so neither API.
``mode = "v1"`` turns it into a (minimal) opencode 1.x that knows one session, and
``mode = "2.x"`` into a (minimal) opencode 2.x that knows it (its health, the session,
admissions, a transcript of what was admitted and of the messages a test puts in
``transcript`` (never answered while ``hang_reads``), no permission request, an event
stream that stays open and tells nothing), for tests where opencode is replaced
while pigeond runs.  Every request is recorded, so a test can show what pigeond sent
under ``/api/``.  A twisted.web Resource: served in memory (StubTreq) or over real HTTP
(a Site on 127.0.0.1).  The full 2.x stand-in is :mod:`testkit.opencode_v2_standin`.
"""

from __future__ import annotations

import json

from twisted.web import server
from twisted.web.resource import Resource

WEB_APP = b'<!doctype html>\n<html lang="en">\n  <head>\n    <meta charset="utf-8" />'
MISSING_ROUTE_MODES = ("web app", "404")


class OpencodeV2StandIn(Resource):
    isLeaf = True

    def __init__(self, mode: str = "web app", session: str = "ses_known") -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.mode = mode
        self.session = session
        self.directory = "/tmp"
        self.seen: list[tuple[str, str]] = []  # (method, path) of every request
        self.admitted: list[dict[str, object]] = []  # the 2.x admissions' bodies
        self.transcript: list[dict[str, object]] = []  # the 2.x transcript's other messages
        self.hang_reads = False  # while True, a 2.x transcript read is never answered

    def render(self, request: server.Request) -> bytes | int:
        method = (request.method or b"").decode()
        path = (request.path or b"").decode()
        self.seen.append((method, path))
        if self.mode == "2.x":
            return self._v2(request, method, path)
        if path.startswith("/api/"):
            return self._json(request, 200, {"data": []})
        if self.mode == "v1":
            return self._v1(request, method, path)
        if self.mode == "404":
            request.setResponseCode(404)
            request.setHeader(b"content-type", b"text/plain")
            return b"404 Not Found"
        request.setHeader(b"content-type", b"text/html")
        return WEB_APP

    def _v1(self, request: server.Request, method: str, path: str) -> bytes:
        if path == "/session/status":
            return self._json(request, 200, {})
        if path == f"/session/{self.session}" and method == "GET":
            return self._json(request, 200, {"id": self.session, "directory": self.directory})
        if path == f"/session/{self.session}/message":
            return self._json(request, 200, [])
        if path == f"/session/{self.session}/prompt_async":
            request.setResponseCode(204)
            return b""
        not_found = {"name": "NotFoundError", "data": {"message": f"Session not found: {path}"}}
        return self._json(request, 404, not_found)

    def _v2(self, request: server.Request, method: str, path: str) -> bytes | int:
        session = f"/api/session/{self.session}"
        if path == "/api/health":
            return self._json(request, 200, {"healthy": True, "version": "2.3.0", "pid": 1})
        if path == session and method == "GET":
            info = {"id": self.session, "location": {"directory": self.directory}}
            return self._json(request, 200, {"data": info})
        if path == session + "/prompt" and method == "POST":
            body = json.loads(request.content.read())  # type: ignore[union-attr]
            if body not in self.admitted:
                self.admitted.append(body)
            return self._json(request, 200, {"data": {"id": body["id"], "admittedSeq": 1}})
        if path == session + "/message" and self.hang_reads:
            return server.NOT_DONE_YET
        if path == session + "/message":
            inputs = [{"type": "user", "id": b["id"], "text": b.get("text", "")}
                      for b in self.admitted]  # fmt: skip
            messages = inputs + self.transcript
            if request.args.get(b"order") == [b"desc"]:
                messages.reverse()  # newest first, as a 2.x answers it
            return self._json(request, 200, {"data": messages, "cursor": {}})
        if path == "/api/event":  # open, with nothing to tell
            request.setHeader(b"content-type", b"text/event-stream")
            request.write(b'data: {"id": "evt_1", "type": "server.connected", "data": {}}\n\n')
            return server.NOT_DONE_YET
        if path == "/api/permission/request":
            location = {"directory": self.directory, "project": {"id": "prj", "directory": "/"}}
            return self._json(request, 200, {"location": location, "data": []})
        if path.startswith("/api/session/") and not path.startswith(session + "/"):
            missing = {"_tag": "SessionNotFoundError", "message": f"Session not found: {path}"}
            return self._json(request, 404, missing)
        request.setResponseCode(404)
        return b'"Not Found"'

    @staticmethod
    def _json(request: server.Request, status: int, body: object) -> bytes:
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(body).encode()

    def api_requests(self) -> list[tuple[str, str]]:
        """What reached ``/api/*``: pigeond must never send anything there."""
        return [(m, p) for m, p in self.seen if p.startswith("/api/")]
