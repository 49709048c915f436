"""``GET /swarm/search?q=…&session=…``: a session's messages that say something.

An agent finds what it sent or received, never another session's traffic, so
``session`` is required (operators search everything with ``pigeon search`` and the
TUI, which read the database).  The answer is the inbox's message fields, newest
first, bounded like an inbox page: ``limit`` messages (default 50, at most 500) and
``inbox_max_bytes`` of them.  The text is searched word for word (see
:mod:`pigeond.storage.search`): nothing in it is parsed as FTS5 syntax, and text
that cannot be searched for is a 400, never a 500.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.web import server

from pigeond.api.owed import session_param
from pigeond.api.web import HttpError, JsonApi, JsonResponse, query_param
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database
from pigeond.storage.search import (
    DEFAULT_SEARCH_LIMIT,
    MAX_SEARCH_LIMIT,
    SearchQueryError,
    match_expression,
)

SEARCH_PATH = "/swarm/search"


def search_limit(raw: str | None) -> int:
    """The ``limit`` query parameter: 1 to MAX_SEARCH_LIMIT, DEFAULT_SEARCH_LIMIT if absent."""
    if raw is None:
        return DEFAULT_SEARCH_LIMIT
    # digits counted before int(): it refuses more than 4300 of them with a ValueError
    digits = raw.lstrip("0")
    if raw.isascii() and raw.isdigit() and len(digits) <= 3 and 1 <= int(raw) <= MAX_SEARCH_LIMIT:
        return int(raw)
    raise HttpError(400, f"query parameter 'limit' must be an integer from 1 to {MAX_SEARCH_LIMIT}")


class SearchRoute:
    def __init__(self, db: Database, max_bytes: Callable[[], int]) -> None:
        """``max_bytes`` gives the byte budget at each request: the inbox's, which a
        reload may change."""
        self._db = db
        self._max_bytes = max_bytes

    def install(self, api: JsonApi) -> JsonApi:
        api.route("GET", SEARCH_PATH, self.search)
        return api

    async def search(self, request: server.Request) -> JsonResponse:
        text = query_param(request, "q")
        if not text:
            raise HttpError(400, "query parameter 'q' is required")
        session = session_param(request)
        limit = search_limit(query_param(request, "limit"))
        try:
            match_expression(text, session)  # refused here, before a thread is taken
            page = await self._db.read(
                SwarmRepository.search_page, text, session, limit, self._max_bytes()
            )
        except SearchQueryError as e:
            raise HttpError(400, f"query parameter 'q': {e}") from e
        return JsonResponse(
            200, {"messages": [m.inbox_view() for m in page.messages], "has_more": page.has_more}
        )
