"""A stand-in opencode 2.x server on 127.0.0.1, written from the 2.x protocol.

No real 2.x server can run here, so the tests and benchmarks of the 2.x runtime talk to
this.  What it keeps from the protocol:

* everything is under ``/api/*`` and behind HTTP Basic (user ``opencode``, the password
  it is given): without it every path is 401; the 1.x routes (``/session``,
  ``/global/event``) are 404;
* ``POST /api/session/{id}/prompt`` (and ``/synthetic``) admit an input durably (for
  the stand-in's life, which outlasts any pigeond a test kills) and idempotently: the
  same ``id`` and body answer the same receipt, another body under that id is 409
  ``ConflictError``; queue and steer behave as
  :mod:`testkit.opencode_v2_session` describes;
* the transcript (``GET /api/session/{id}/message``) has a ``user`` (or ``synthetic``)
  message per input and one ``assistant`` message per turn;
* a session's directory is the one it was created with; the ``location[directory]``
  query (but for the permission list's) and the ``x-opencode-directory`` header are
  not read;
* a permission request a test makes (:meth:`OpencodeV2StandIn.ask_permission`) is
  listed at its session's directory (``GET /api/permission/request``) until it is
  answered (``POST /api/session/{id}/permission/{requestID}/reply``; an unknown one is
  404 ``PermissionNotFoundError``);
* ``GET /api/event`` is volatile: a reader that falls ``event_capacity`` events behind is
  dropped, and nothing is replayed.  It tells ``server.connected`` on opening, an
  input admitted (``session.next.prompt.admitted``), a turn starting (``session.status``
  busy) and ending (``session.idle``), and a permission asked and answered
  (``permission.v2.asked``, ``permission.v2.replied``), each in the v2 types' shape
  (``{"id", "type", "data"}``).

Bodies follow the v2 types published in npm ``@opencode-ai/sdk`` (a test checks them);
the prompt's text is nested (``{"prompt": {"text": ...}}``) as those types declare, or
flat (``{"text": ...}``, the released 2.3.0 protocol) with ``prompt_shape="flat"``.
With ``synthetic=False`` it has no ``/synthetic`` route (404 ``"Not Found"``, as for any
path it does not have), as a server before 2.3.0 and the SDK's v2 types.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

from testkit.opencode_v2_session import (
    AGENT,
    MODEL_REF,
    AdmissionConflict,
    EventHub,
    Model,
    StandInSession,
    echo_model,
)
from testkit.stdlib_http import JsonHandler, serving

USER = "opencode"
VERSION = "2.3.0"
DELIVERIES = ("queue", "steer")
PROMPT_FIELDS = {
    "nested": frozenset({"id", "prompt", "delivery", "resume"}),
    "flat": frozenset({"id", "text", "files", "agents", "metadata", "delivery", "resume"}),
}
SYNTHETIC_FIELDS = frozenset({"id", "text", "description", "metadata", "delivery", "resume"})
CREATE_FIELDS = frozenset({"id", "agent", "model", "location"})
INBOX_FIELDS = frozenset({"delivery"})
PERMISSION_REPLY_FIELDS = frozenset({"reply", "message"})
PERMISSION_REPLIES = ("once", "always", "reject")
WAIT_TIMEOUT_S = 60.0

ROUTES: tuple[tuple[str, str, str], ...] = (
    ("GET", "/api/health", "health"),
    ("GET", "/api/info", "info"),
    ("GET", "/api/event", "event"),
    ("GET", "/api/session/active", "active"),
    ("POST", "/api/session", "create"),
    ("GET", "/api/session/{sessionID}", "get"),
    ("POST", "/api/session/{sessionID}/prompt", "prompt"),
    ("POST", "/api/session/{sessionID}/synthetic", "synthetic"),
    ("GET", "/api/session/{sessionID}/message", "messages"),
    ("POST", "/api/session/{sessionID}/wait", "wait"),
    ("GET", "/api/session/{sessionID}/inbox", "inbox"),
    ("DELETE", "/api/session/{sessionID}/inbox/{inboxID}", "cancel"),
    ("PATCH", "/api/session/{sessionID}/inbox/{inboxID}", "switch"),
    ("GET", "/api/permission/request", "permissions"),
    ("POST", "/api/session/{sessionID}/permission/{requestID}/reply", "permission_reply"),
)
"""(method, path template as the protocol writes it, handler): every route it answers.
The first that matches wins (``/api/session/active`` before ``/api/session/{sessionID}``)."""
_COMPILED = tuple(
    (method, re.compile(re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template)), name)
    for method, template, name in ROUTES
)


class BadRequest(Exception):
    """A body the protocol does not accept (400 ``InvalidRequestError``)."""


class OpencodeV2StandIn:
    """The server's state: its sessions, its event hub, its password and its model."""

    def __init__(
        self,
        password: str,
        *,
        model: Model = echo_model,
        step_s: float = 0.05,
        event_capacity: int = 64,
        prompt_shape: str = "nested",
        directory: str = "/tmp",
        admit_delay_s: float = 0.0,
        synthetic: bool = True,
    ) -> None:
        """``admit_delay_s``: how long an admission's answer waits after the input is
        admitted (a client killed meanwhile has an input it never heard of)."""
        self.password = password
        self.missing = frozenset() if synthetic else frozenset({"synthetic"})
        """Handler names of routes it does not have."""
        self.model = model
        self.step_s = step_s
        self.admit_delay_s = admit_delay_s
        self.request_fields = {
            "create": CREATE_FIELDS,
            "prompt": PROMPT_FIELDS[prompt_shape],
            "synthetic": SYNTHETIC_FIELDS,
            "switch": INBOX_FIELDS,
            "permission_reply": PERMISSION_REPLY_FIELDS,
        }
        """Handler name → the body fields it accepts (any other is 400)."""
        self.directory = directory
        self.events = EventHub(event_capacity)
        self.sessions: dict[str, StandInSession] = {}
        self.closed = threading.Event()
        self.requests: list[tuple[str, str]] = []
        """(method, path) of every request, answered or refused, in order."""
        self.permissions: dict[str, dict[str, Any]] = {}
        """The permission requests pending, by id (``PermissionV2Request``)."""
        self.permission_replies: list[tuple[str, str]] = []
        """(request id, reply) of every answer taken, in order."""
        self.url = ""
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """Serve on a free port of 127.0.0.1 until the block ends; its URL."""
        handler = type("BoundStandInHandler", (StandInHandler,), {"standin": self})
        with serving(handler) as url:
            self.url = url
            try:
                yield url
            finally:
                self.closed.set()
                for session in list(self.sessions.values()):
                    session.close()

    def create_session(
        self, session_id: str | None = None, directory: str | None = None
    ) -> StandInSession:
        """A new idle session (its runner thread started), in ``directory`` (else the
        stand-in's); an id that exists already is that session."""
        with self._lock:
            session_id = session_id or f"ses_{len(self.sessions) + 1:06d}"
            if session_id in self.sessions:
                return self.sessions[session_id]
            where = directory or self.directory
            session = StandInSession(session_id, where, self.events, self.model, self.step_s)
            self.sessions[session_id] = session
        threading.Thread(target=session.run_forever, daemon=True).start()
        return session

    def ask_permission(
        self, session: StandInSession, action: str, resources: list[str], call_id: str
    ) -> str:
        """``session``'s tool call ``call_id`` asks permission (and waits): its id."""
        with self._lock:
            request_id = f"per_standin{len(self.permissions) + len(self.permission_replies):06d}"
            source = {"type": "tool", "messageID": f"msg_step_{call_id}", "callID": call_id}
            self.permissions[request_id] = {
                "id": request_id, "sessionID": session.id, "action": action,
                "resources": list(resources), "save": [f"{action} *"], "source": source,
            }  # fmt: skip
            asked = dict(self.permissions[request_id])
        self.events.publish("permission.v2.asked", asked)
        return request_id

    def take_reply(self, session_id: str, request_id: str, reply: str) -> bool:
        """The answer to a pending request of the session; False when there is none."""
        with self._lock:
            request = self.permissions.get(request_id)
            if request is None or request["sessionID"] != session_id:
                return False
            del self.permissions[request_id]
            self.permission_replies.append((request_id, reply))
        replied = {"sessionID": session_id, "requestID": request_id, "reply": reply}
        self.events.publish("permission.v2.replied", replied)
        return True

    def session_info(self, session: StandInSession) -> dict[str, Any]:
        return {
            "id": session.id,
            "projectID": "prj_standin",
            "agent": AGENT,
            "model": dict(MODEL_REF),
            "cost": 0,
            "tokens": {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}},
            "time": {"created": session.created_ms, "updated": session.created_ms},
            "title": f"stand-in session {session.id}",
            "location": {"directory": session.directory},
        }

    def authorized(self, header: str | None) -> bool:
        expected = base64.b64encode(f"{USER}:{self.password}".encode()).decode()
        return header == f"Basic {expected}"


class StandInHandler(JsonHandler):
    """One request: authenticated, routed by :data:`ROUTES`, answered as JSON (or SSE)."""

    standin: OpencodeV2StandIn

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def _dispatch(self, method: str) -> None:
        self.standin.requests.append((method, urlsplit(self.path).path))
        if not self.standin.authorized(self.headers.get("authorization")):
            self.send_response(401)
            self.send_header("www-authenticate", 'Basic realm="opencode"')
            self.send_header("content-type", "application/json")
            body = json.dumps({"_tag": "UnauthorizedError", "message": "Unauthorized"}).encode()
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        url = urlsplit(self.path)
        for route_method, pattern, name in _COMPILED:
            match = pattern.fullmatch(url.path)
            if match is None or route_method != method or name in self.standin.missing:
                continue
            groups = match.groupdict()
            session = None
            if "sessionID" in groups:
                session = self.standin.sessions.get(groups["sessionID"])
                if session is None:
                    self.send_json(404, _not_found(groups["sessionID"]))
                    return
            try:
                getattr(self, f"_{name}")(session, groups, parse_qs(url.query))
            except BadRequest as exc:
                self.send_json(400, {"_tag": "InvalidRequestError", "message": str(exc)})
            except AdmissionConflict as exc:
                message = f"input {exc} was admitted with another body"
                self.send_json(409, {"_tag": "ConflictError", "message": message})
            return
        self.send_bytes(404, b'"Not Found"')

    def _body(self, route: str) -> dict[str, Any]:
        allowed = self.standin.request_fields[route]
        try:
            body = json.loads(self.read_body() or b"{}")
        except ValueError as exc:
            raise BadRequest(f"body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise BadRequest("body is not an object")
        unknown = set(body) - allowed
        if unknown:
            raise BadRequest(f"unknown fields {sorted(unknown)}")
        return body

    def _no_content(self) -> None:
        self.send_response(204)
        self.end_headers()

    def _health(self, *_: object) -> None:
        self.send_json(200, {"healthy": True, "version": VERSION, "pid": os.getpid()})

    def _info(self, *_: object) -> None:
        info = {"version": VERSION, "pid": os.getpid(), "urls": [self.standin.url]}
        self.send_json(200, {**info, "paths": {"tmp": "/tmp"}})

    def _active(self, *_: object) -> None:
        running = {s.id: {"type": "running"} for s in self.standin.sessions.values() if s.busy()}
        self.send_json(200, {"data": running})

    def _create(self, *_: object) -> None:
        body = self._body("create")
        location = body.get("location")
        directory = location.get("directory") if isinstance(location, dict) else None
        session = self.standin.create_session(body.get("id"), directory)
        self.send_json(200, {"data": self.standin.session_info(session)})

    def _get(self, session: StandInSession, *_: object) -> None:
        self.send_json(200, {"data": self.standin.session_info(session)})

    def _prompt(self, session: StandInSession, *_: object) -> None:
        body = self._body("prompt")
        prompt = body.get("prompt", body)
        text = prompt.get("text") if isinstance(prompt, dict) else None
        self._admit(session, "user", text, body)

    def _synthetic(self, session: StandInSession, *_: object) -> None:
        body = self._body("synthetic")
        self._admit(session, "synthetic", body.get("text"), body)

    def _admit(
        self, session: StandInSession, kind: str, text: object, body: dict[str, Any]
    ) -> None:
        delivery = body.get("delivery", "steer")
        if not isinstance(text, str) or delivery not in DELIVERIES:
            raise BadRequest("a text and a delivery of queue or steer are required")
        wakes = body.get("resume", True) is not False
        admitted = session.admit(kind, body.get("id"), text, delivery, wakes, body)
        time.sleep(self.standin.admit_delay_s)
        self.send_json(200, {"data": admitted.receipt(session.id)})

    def _messages(self, session: StandInSession, _: object, query: dict[str, list[str]]) -> None:
        messages = session.transcript()
        if query.get("order", ["asc"])[0] == "desc":
            messages.reverse()
        limit = query.get("limit")
        if limit:
            messages = messages[: int(limit[0])]
        self.send_json(200, {"data": messages, "cursor": {}})

    def _wait(self, session: StandInSession, *_: object) -> None:
        if session.wait_idle(WAIT_TIMEOUT_S):
            self._no_content()
        else:
            self.send_json(503, {"_tag": "ServiceUnavailableError", "message": "still running"})

    def _inbox(self, session: StandInSession, *_: object) -> None:
        self.send_json(200, {"data": [i.receipt(session.id) for i in session.inbox()]})

    def _cancel(self, session: StandInSession, groups: dict[str, str], _: object) -> None:
        session.cancel(groups["inboxID"])
        self._no_content()

    def _switch(self, session: StandInSession, groups: dict[str, str], _: object) -> None:
        delivery = self._body("switch").get("delivery")
        if delivery not in DELIVERIES:
            raise BadRequest("delivery must be queue or steer")
        if session.switch(groups["inboxID"], delivery):
            self._no_content()
        else:
            self.send_json(409, {"_tag": "ConflictError", "message": "input is not pending"})

    def _permissions(self, _: object, __: object, query: dict[str, list[str]]) -> None:
        directory = query.get("location[directory]", [self.standin.directory])[0]
        sessions = self.standin.sessions
        listed = [
            r for r in list(self.standin.permissions.values())
            if sessions[r["sessionID"]].directory == directory
        ]  # fmt: skip
        project = {"id": "prj_standin", "directory": directory}
        self.send_json(200, {"location": {"directory": directory, "project": project},
                             "data": listed})  # fmt: skip

    def _permission_reply(self, session: StandInSession, groups: dict[str, str], _: object) -> None:
        reply = self._body("permission_reply").get("reply")
        if reply not in PERMISSION_REPLIES:
            raise BadRequest("reply must be once, always or reject")
        request_id = groups["requestID"]
        if self.standin.take_reply(session.id, request_id, reply):
            self._no_content()
            return
        message = f"Permission request not found: {request_id}"
        self.send_json(404, {"_tag": "PermissionNotFoundError", "requestID": request_id,
                             "message": message})  # fmt: skip

    def _event(self, *_: object) -> None:
        """SSE until the reader is dropped or the stand-in stops; a small send buffer, so a
        reader that does not read soon blocks this writer and falls behind."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        subscriber = self.standin.events.subscribe()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        connected = {"id": "evt_connected", "type": "server.connected", "data": {}}
        try:
            self._write_event(connected)
            while not self.standin.closed.is_set() and not subscriber.dropped:
                event = subscriber.next(0.2)
                if event is not None:
                    self._write_event(event)
        except OSError:
            pass  # the reader went away
        finally:
            self.standin.events.unsubscribe(subscriber)
            self.close_connection = True

    def _write_event(self, event: dict[str, Any]) -> None:
        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.flush()


def _not_found(session_id: str) -> dict[str, str]:
    message = f"Session not found: {session_id}"
    return {"_tag": "SessionNotFoundError", "sessionID": session_id, "message": message}
