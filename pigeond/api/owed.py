"""``GET /swarm/owed?session=<id>``: the replies a session owes, and is owed.

The obligations come from sends that expected a reply (pigeond/storage/obligations.py);
only outstanding ones are listed (open, reminded, overdue), oldest first, at most
:data:`~pigeond.storage.obligations.LIST_LIMIT` a side.  The plugin's ``swarm_read``
turns the ``owes`` side into lines the agent reads ("you owe a reply to msg_… from
ses_…").  Like every route but ``/health`` it is behind the daemon's access check.
"""

from __future__ import annotations

from twisted.web import server

from pigeond.api.web import HttpError, JsonApi, JsonResponse, query_param
from pigeond.model import SESSION_ID_RE
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database

OWED_PATH = "/swarm/owed"


def session_param(request: server.Request) -> str:
    """The ``session`` query parameter, required and shaped like a session id."""
    session = query_param(request, "session")
    if not session:
        raise HttpError(400, "query parameter 'session' is required")
    if not SESSION_ID_RE.fullmatch(session):
        raise HttpError(400, f"query parameter 'session' must match {SESSION_ID_RE.pattern}")
    return session


class OwedRoute:
    def __init__(self, db: Database) -> None:
        self._db = db

    def install(self, api: JsonApi) -> JsonApi:
        api.route("GET", OWED_PATH, self.owed)
        return api

    async def owed(self, request: server.Request) -> JsonResponse:
        session = session_param(request)
        listed = await self._db.read(SwarmRepository.owed, session)
        return JsonResponse(
            200,
            {
                "session": session,
                "owes": [o.view() for o in listed.owes],
                "owed": [o.view() for o in listed.owed],
            },
        )
