"""``GET /swarm/costs``: what the turns hand-offs caused used, per thread and per session.

A turn is recorded when the verifier finds it ended in its target's transcript
(:mod:`pigeond.storage.costs`); this route sums them:

- no parameter: the ``limit`` latest threads (by their latest send, as ``GET
  /swarm/threads`` lists them; zeros for one that caused no turn yet) and the ``limit``
  sessions with the newest turns, newest first;
- ``thread=<id>``: that thread (zeros when none of its messages has caused a turn yet), and
  the sessions its turns ran in;
- ``session=<id>``: that session's turns (as a target), and no threads.

``cost`` is in US dollars and sums the turns whose cost is known (opencode's);
``cost_unknown_turns`` counts the others (Claude Code's transcripts carry no cost).  Like
every route but ``/health`` it is behind the daemon's access check.
"""

from __future__ import annotations

from typing import Any

from twisted.web import server

from pigeond.api.paging import page_limit
from pigeond.api.web import HttpError, JsonApi, JsonResponse, query_param
from pigeond.costs import NO_COST, CostTotals
from pigeond.model import SESSION_ID_RE, THREAD_RE
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database

COSTS_PATH = "/swarm/costs"


def _rows(key: str, sums: dict[str, CostTotals]) -> list[dict[str, Any]]:
    return [{key: name, **totals.view()} for name, totals in sums.items()]


def _costs_of_thread(
    repo: SwarmRepository, thread: str
) -> tuple[dict[str, CostTotals], dict[str, CostTotals]]:
    return repo.thread_costs([thread]), repo.thread_session_costs(thread)


class CostsRoute:
    def __init__(self, db: Database) -> None:
        self._db = db

    def install(self, api: JsonApi) -> JsonApi:
        api.route("GET", COSTS_PATH, self.costs)
        return api

    async def costs(self, request: server.Request) -> JsonResponse:
        thread = query_param(request, "thread")
        session = query_param(request, "session")
        limit = page_limit(query_param(request, "limit"))
        if thread is not None and session is not None:
            raise HttpError(400, "give at most one of query parameters 'thread' and 'session'")
        if thread is not None and not THREAD_RE.fullmatch(thread):
            raise HttpError(400, f"query parameter 'thread' must match {THREAD_RE.pattern}")
        if session is not None and not SESSION_ID_RE.fullmatch(session):
            raise HttpError(400, f"query parameter 'session' must match {SESSION_ID_RE.pattern}")
        if thread is not None:
            threads, sessions = await self._db.read(_costs_of_thread, thread)
            threads.setdefault(thread, NO_COST)
        elif session is not None:
            threads = {}
            sessions = await self._db.read(SwarmRepository.session_costs, [session])
            sessions.setdefault(session, NO_COST)
        else:
            threads = await self._db.read(SwarmRepository.recent_thread_costs, limit)
            sessions = await self._db.read(SwarmRepository.session_costs, None, limit)
        return JsonResponse(
            200, {"threads": _rows("thread", threads), "sessions": _rows("session", sessions)}
        )
