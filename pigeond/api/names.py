"""``POST /swarm/names``, ``GET /swarm/names`` and ``DELETE /swarm/names/<name>``: names
sessions claim, give up, and sends to them.

A session claims a name (``reviewer``) so others can write ``to: "@reviewer"`` instead of
an id that changes whenever the session is replaced.  A name held by a live session moves
only with ``force``; one whose session opencode no longer has (it answers 404) is free to
claim, so the replacement session takes its predecessor's name without an operator.  With
no opencode to ask (delivery off, or no clear answer) the holder counts as live.  A name
is released by ``DELETE``; with ``?session=`` only if that session still holds it, so a
session giving up its name cannot free one its successor took meanwhile.

Like every route but ``/health`` these are behind the daemon's access check.  Beyond it,
a session's name is its own (:mod:`pigeond.api.authority`): a claim for session X is
allowed to X's own ``swarm_name`` call or to a person; moving a name a live session holds
(``force``) and releasing a name only to a person.  One claim needs no call: an MCP-only
member ``mcp_<name>`` (``pigeon-mcp --as @name``, whose client names no session) claiming
its own ``<name>``, which only says what its id already says.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web import server

from pigeond.api.authority import CALL_ID_FIELD, OwnCall, SessionAuthority, call_id_of
from pigeond.api.send_request import InvalidRequest, SendRequest, check_name, decode_json_object
from pigeond.api.web import HttpError, JsonApi, JsonResponse, query_param, read_body
from pigeond.model import MCP_MEMBER_PREFIX, NAME_RE, SESSION_ID_RE, NewMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database
from pigeond.storage.names import ANY_HOLDER, ClaimOutcome

NAMES_PATH = "/swarm/names"
NAME_PATH = NAMES_PATH + "/{name}"
log = Logger()


class SessionLiveness(Protocol):
    """What a claim needs of :class:`pigeond.delivery.registry.SessionDirectoryRegistry`."""

    def invalidate(self, session_id: str) -> None: ...

    async def exists(self, session_id: str) -> bool | None: ...


async def resolve_target(db: Database, send: SendRequest) -> NewMessage:
    """The send with its ``@name`` replaced by the session holding the name now; a 404 when
    nobody does.  A retry of a msg_id already stored for that name keeps the session it
    went to, so a client that lost its 202 is answered as before even if the name moved."""
    message, name = send.message, send.to_name
    if name is None:
        return message
    stored = await db.read(SwarmRepository.get, message.msg_id)
    if stored is not None and stored.to_name == name and stored.to_session is not None:
        return replace(message, to_session=stored.to_session)
    holder = await db.read(SwarmRepository.name_holder, name)
    if holder is None:
        raise HttpError(404, f"nobody holds the name @{name} (see GET {NAMES_PATH})")
    return replace(message, to_session=holder)


class NamesRoute:
    def __init__(
        self,
        db: Database,
        clock: IReactorTime,
        liveness: SessionLiveness | None,
        authority: SessionAuthority,
    ) -> None:
        """``liveness`` None: no opencode to ask (delivery off), every holder counts as live."""
        self._db = db
        self._clock = clock
        self._liveness = liveness
        self._authority = authority

    def install(self, api: JsonApi) -> JsonApi:
        api.route("POST", NAMES_PATH, self.claim)
        api.route("GET", NAMES_PATH, self.list)
        api.route("DELETE", NAME_PATH, self.release)
        return api

    async def list(self, request: server.Request) -> JsonResponse:
        entries = await self._db.read(SwarmRepository.names)
        return JsonResponse(200, {"names": [e.view() for e in entries]})

    async def claim(self, request: server.Request) -> JsonResponse:
        """200 with the name, its session and whom it was taken from; 409 when a live
        session holds it and ``force`` is not set; 403 when the caller is neither the
        session's own ``swarm_name`` call nor a person, or is not a person and ``force``
        would move the name from a live session."""
        try:
            body = decode_json_object(read_body(request))
            name, session, force = _parse_claim(body)
        except InvalidRequest as e:
            raise HttpError(400, str(e)) from e
        call_id = call_id_of(body.get(CALL_ID_FIELD))
        if session != MCP_MEMBER_PREFIX + name:  # mcp_<name> claiming <name>: see the docstring
            own = OwnCall(
                "swarm_name", lambda given: given.get("name") == name,
                "claim a name for it", f"name set {name} {session}",
            )  # fmt: skip
            await self._authority.acting_for(request, session, own, call_id)
        # force by anyone but a person moves only the name of a holder that is gone
        asked_force, force = force, force and self._authority.is_person(request)
        now_ms = int(self._clock.seconds() * 1000)
        claim = await self._db.write(
            SwarmRepository.claim_name, name, session, now_ms,
            replace=ANY_HOLDER if force else None,
        )  # fmt: skip
        if claim.outcome is ClaimOutcome.HELD:
            assert claim.holder is not None
            if not await self._gone(claim.holder):
                if asked_force:  # and not a person
                    self._authority.person_only(
                        request, f"take the name {name} from {claim.holder}, a live session",
                        f"name set {name} {session} --force",
                    )  # fmt: skip
                raise HttpError(
                    409,
                    f"the name {name} is held by {claim.holder}, a live session (or one"
                    " opencode could not be asked about); claim it with force to move it",
                    {"name": name, "session": claim.holder},
                )
            claim = await self._db.write(
                SwarmRepository.claim_name, name, session, now_ms, replace=claim.holder
            )
            if claim.outcome is ClaimOutcome.HELD:  # another claim took it meanwhile
                raise HttpError(
                    409, f"the name {name} was just claimed by {claim.holder}",
                    {"name": name, "session": claim.holder},
                )  # fmt: skip
        previous = claim.holder if claim.outcome is ClaimOutcome.CLAIMED else None
        if claim.outcome is ClaimOutcome.CLAIMED:
            log.info("name {name} claimed by {session} (was {previous})",
                     name=name, session=session, previous=previous)  # fmt: skip
        return JsonResponse(
            200,
            {"name": name, "session": session, "previous": previous, "released": claim.released},
        )

    async def release(self, request: server.Request, name: str) -> JsonResponse:
        """200 with the name and the session that held it; 404 when nobody holds it; 409
        when ``?session=`` is given and another session holds it (nothing changes)."""
        if not NAME_RE.fullmatch(name):
            raise HttpError(400, f"the name in the path must match {NAME_RE.pattern}")
        session = query_param(request, "session")
        if session is not None and not SESSION_ID_RE.fullmatch(session):
            raise HttpError(400, f"query parameter 'session' must match {SESSION_ID_RE.pattern}")
        self._authority.person_only(request, f"release the name {name}", f"name release {name}")
        holder = await self._db.write(SwarmRepository.release_name, name, session)
        if holder is None:
            raise HttpError(404, f"nobody holds the name {name} (see GET {NAMES_PATH})")
        if session is not None and holder != session:
            raise HttpError(
                409, f"the name {name} is held by {holder}, not {session}; nothing released",
                {"name": name, "session": holder},
            )  # fmt: skip
        log.info("name {name} released (was {session})", name=name, session=holder)
        return JsonResponse(200, {"released": True, "name": name, "session": holder})

    async def _gone(self, holder: str) -> bool:
        """Whether opencode says now that it no longer has ``holder`` (404): asked afresh,
        since a session deleted a moment ago may still be in the registry's cache."""
        if self._liveness is None:
            return False
        self._liveness.invalidate(holder)
        return await self._liveness.exists(holder) is False


def _parse_claim(body: dict[str, Any]) -> tuple[str, str, bool]:
    name, session, force = body.get("name"), body.get("session"), body.get("force", False)
    if not isinstance(name, str) or not name:
        raise InvalidRequest("field 'name' is required and must be a non-empty string")
    check_name(name, "name")
    if not isinstance(session, str) or not SESSION_ID_RE.fullmatch(session):
        raise InvalidRequest(f"field 'session' is required and must match {SESSION_ID_RE.pattern}")
    if force is None:
        force = False
    if not isinstance(force, bool):
        raise InvalidRequest("field 'force' must be true or false")
    return name, session, force
