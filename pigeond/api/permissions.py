"""``GET /swarm/permissions`` and ``POST /swarm/permissions/<id>/reply``: the permission
requests sessions wait on while they handle swarm messages, and the operator's answer.

The requests are recorded by the delivery layer's watch (pigeond/delivery/permissions.py);
the answer goes to opencode through it, so with delivery off (no opencode) there is
nothing to answer with: 503.  An answer opencode no longer wants (answered at the target's
own terminal, opencode restarted, the turn aborted) is a 409, and the request leaves the
list.  Like every route but ``/health`` they are behind the daemon's access check.
"""

from __future__ import annotations

from typing import Protocol

from twisted.web import server

from pigeond.api.send_request import InvalidRequest, decode_json_object
from pigeond.api.web import HttpError, JsonApi, JsonResponse, read_body
from pigeond.model import PERMISSION_ANSWERS, PERMISSION_ID_RE, PermissionAnswerOutcome
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database

PERMISSIONS_PATH = "/swarm/permissions"
REPLY_PATH = "/swarm/permissions/{id}/reply"

_STATUS = {
    PermissionAnswerOutcome.ANSWERED: 200,
    PermissionAnswerOutcome.UNKNOWN: 404,
    PermissionAnswerOutcome.GONE: 409,
    PermissionAnswerOutcome.TURN_ENDED: 409,
    PermissionAnswerOutcome.REFUSED: 502,
    PermissionAnswerOutcome.UNREACHABLE: 503,
}


class PermissionAnswerer(Protocol):
    """Who answers in opencode (:class:`~pigeond.delivery.permissions.PermissionWatch`)."""

    async def answer(self, request_id: str, reply: str) -> tuple[PermissionAnswerOutcome, str]: ...


class PermissionRoutes:
    def __init__(self, db: Database, answerer: PermissionAnswerer | None) -> None:
        """``answerer`` None: delivery is off, so nothing can be answered."""
        self._db = db
        self._answerer = answerer

    def install(self, api: JsonApi) -> JsonApi:
        api.route("GET", PERMISSIONS_PATH, self.list)
        api.route("POST", REPLY_PATH, self.reply)
        return api

    async def list(self, request: server.Request) -> JsonResponse:
        """Every open request, oldest first."""
        requests = await self._db.read(SwarmRepository.open_permissions)
        return JsonResponse(200, {"permissions": [r.view() for r in requests]})

    async def reply(self, request: server.Request, id: str) -> JsonResponse:
        request_id = id  # the path's {id}, opencode's id of the request
        if not PERMISSION_ID_RE.fullmatch(request_id):
            raise HttpError(400, f"the request id must match {PERMISSION_ID_RE.pattern}")
        try:
            answer = decode_json_object(read_body(request)).get("answer")
        except InvalidRequest as e:
            raise HttpError(400, str(e)) from e
        if answer not in PERMISSION_ANSWERS:
            raise HttpError(400, f"field 'answer' must be one of {', '.join(PERMISSION_ANSWERS)}")
        if await self._db.read(SwarmRepository.open_permission, request_id) is None:
            raise HttpError(404, f"no open permission request {request_id}")
        if self._answerer is None:
            raise HttpError(503, "delivery is off (no opencode_url): nothing can be answered")
        outcome, line = await self._answerer.answer(request_id, str(answer))
        status = _STATUS[outcome]
        if status != 200:
            raise HttpError(status, line)
        return JsonResponse(200, {"id": request_id, "answer": answer, "outcome": outcome.value})
