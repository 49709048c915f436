"""The permission requests of an opencode 2.x, for the permission watch
(:class:`~pigeond.delivery.permissions.PermissionWatch`): the calls the watch makes of a
1.x (its pending list per directory, an answer), made of a 2.x once the server is found
to be one (the dialect's verdict, as every 2.x call: a 1.x is never asked a 2.x route).

What a 2.x has, per the v2 types of npm ``@opencode-ai/sdk`` 1.19.6 (no real 2.x server
has been asked):

- ``GET /api/permission/request?location[directory]=D`` answers ``{"location", "data":
  [PermissionV2Request]}``, each request ``{"id", "sessionID", "action", "resources",
  "save"?, "metadata"?, "source"?: {"type": "tool", "messageID", "callID"}}``.  The watch
  is given each one in the shape of a 1.x listing's entry (``permission`` the action,
  ``patterns`` the resources, ``always`` what ``save`` would keep, ``tool`` the source's
  call and message), which it reads the same way.
- ``POST /api/session/{sessionID}/permission/{requestID}/reply`` ``{"reply": "once" |
  "always" | "reject"}`` answers 204; a 404 (``PermissionNotFoundError``, or
  ``SessionNotFoundError``) means the request is not pending any more.  The route names
  the session, which the watch's answer does not: it is taken from the directory's list,
  and a request no longer listed is gone.
- Which hand-off a request's turn handles is told on a 1.x by its transcript; a 2.x's is
  not read for it (the 1.x client refuses the read), so the watch takes the newest
  hand-off the session handles.

The watch polls (every ``verify_interval_s``, while a session handles a message); the 2.x
event stream (:mod:`pigeond.delivery.opencode_v2_events`) is only a hint: a
``permission.v2.asked`` or ``…replied`` makes the next tick poll, and a session it last
said idle has its still-listed requests closed as stale (its turn ended).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from pigeond.delivery.opencode_dialect import Dialect, V2Exchange
from pigeond.delivery.opencode_errors import OpencodeError, SpeaksV2, short_text, status_error
from pigeond.delivery.permissions import PermissionApi

T = TypeVar("T")
REQUESTS_PATH = "/api/permission/request"


def one_x_entry(request: object) -> dict[str, Any] | None:
    """A 2.x ``PermissionV2Request`` as the entry of a 1.x listing the watch reads; None
    for one without its id, session or action."""
    if not isinstance(request, dict):
        return None
    rid, session, action = request.get("id"), request.get("sessionID"), request.get("action")
    if not (isinstance(rid, str) and isinstance(session, str) and isinstance(action, str)):
        return None
    entry: dict[str, Any] = {
        "id": rid,
        "sessionID": session,
        "permission": action,
        "patterns": request.get("resources") or [],
        "always": request.get("save") or [],
    }
    source = request.get("source")
    if isinstance(source, dict) and source.get("type") == "tool":
        entry["tool"] = {"callID": source.get("callID"), "messageID": source.get("messageID")}
    return entry


class V2Permissions:
    """The 2.x routes, through the 2.x exchange (its deadline, its password)."""

    def __init__(self, exchange: V2Exchange) -> None:
        self._exchange = exchange

    async def pending(self, directory: str) -> list[dict[str, Any]]:
        """The requests pending at ``directory``, each as a 1.x listing's entry."""
        path = f"{REQUESTS_PATH}?{urlencode({'location[directory]': directory})}"
        what = f"GET {REQUESTS_PATH}"
        status, body = await self._exchange.request("GET", path, {"accept": "application/json"})
        if status != 200:
            raise status_error(what, status, body)
        try:
            data = json.loads(body).get("data")
        except (ValueError, AttributeError) as e:
            raise OpencodeError(f"{what}: no data in {short_text(body)}") from e
        if not isinstance(data, list):
            raise OpencodeError(f"{what}: no list of requests in {short_text(body)}")
        return [e for e in map(one_x_entry, data) if e is not None]

    async def reply(self, request_id: str, directory: str, reply: str) -> bool:
        """Answer the request at ``directory``; False when it is not pending any more."""
        sessions = {e["id"]: e["sessionID"] for e in await self.pending(directory)}
        session = sessions.get(request_id)
        if session is None:
            return False
        path = (
            f"/api/session/{quote(session, safe='')}/permission/{quote(request_id, safe='')}/reply"
        )
        headers = {"accept": "application/json", "content-type": "application/json"}
        answer = json.dumps({"reply": reply}).encode()
        status, body = await self._exchange.request("POST", path, headers, answer)
        if status == 404:
            return False
        if not 200 <= status < 300:
            raise status_error(f"POST {path}", status, body)
        return True


class SwitchingPermissions:
    """The watch's :class:`~pigeond.delivery.permissions.PermissionApi`: the 1.x client's
    calls until a 1.x call finds the server to be a 2.x, then the 2.x routes."""

    def __init__(self, v1: PermissionApi, v2: V2Permissions, dialect: Dialect) -> None:
        self._v1 = v1
        self._v2 = v2
        self._dialect = dialect

    async def pending_permissions(self, directory: str) -> list[dict[str, Any]]:
        return await self._as_it_speaks(
            lambda: self._v1.pending_permissions(directory), lambda: self._v2.pending(directory)
        )

    async def reply_permission(self, request_id: str, directory: str, reply: str) -> bool:
        return await self._as_it_speaks(
            lambda: self._v1.reply_permission(request_id, directory, reply),
            lambda: self._v2.reply(request_id, directory, reply),
        )

    async def messages(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """A 1.x's transcript; on a 2.x, SpeaksV2 (the watch then takes the newest hand-off)."""
        return await self._v1.messages(session_id, directory, limit)

    async def _as_it_speaks(
        self, v1: Callable[[], Awaitable[T]], v2: Callable[[], Awaitable[T]]
    ) -> T:
        if self._dialect.v2_version is None:
            try:
                return await v1()
            except SpeaksV2:
                pass  # found to be a 2.x by this very call
        return await v2()
