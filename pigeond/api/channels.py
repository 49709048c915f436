"""Channels over HTTP: joining and leaving, who is a member, a channel's history, and what
a channel send became.

A send with ``channel`` is stored as the channel message plus one delivery per member but
the sender (pigeond/storage/channels.py), so the 202 says which member got which copy
(``deliveries``) and who was left out and why (``skipped``), and ``GET /swarm/message/<id>``
of the channel message follows each copy.  The routes:

* ``POST /swarm/channels/<channel>/members`` ``{"session": "ses_…" | "@name"}``: join;
  201 when joined, 200 when already a member, 409 when the channel has
  ``max_channel_members``.  A session opencode says it does not have (404) cannot join:
  its copies would only fail, one by one.
* ``DELETE /swarm/channels/<channel>/members/<session>``: leave (404: not a member).
* ``GET /swarm/channels/<channel>``: its members; ``GET /swarm/channels`` every channel
  with members (``?session=``: only those that session is a member of).
* ``GET /swarm/channel/<channel>?since=cur_N&limit=K``: the channel's messages, paged as
  ``GET /swarm/inbox`` is (the cursor numbers accepts, not hand-offs), so a member who
  joined late can read what came before.

Like every route but ``/health`` they are behind the daemon's access check.  Beyond it,
a session's memberships are its own (:mod:`pigeond.api.authority`): joining session X or
removing it is allowed only to X's own ``swarm_channel`` call (``join`` or ``leave`` of
that channel, in flight) or to a person.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web import server

from pigeond.api.authority import CALL_ID_FIELD, OwnCall, SessionAuthority, call_id_of
from pigeond.api.names import NAMES_PATH, SessionLiveness
from pigeond.api.paging import cursor_number, encode_cursor, page_limit
from pigeond.api.send_request import InvalidRequest, check_name, decode_json_object
from pigeond.api.web import HttpError, JsonApi, JsonResponse, query_param, read_body
from pigeond.config import Config
from pigeond.model import CHANNEL_RE, NAME_MARK, NAME_RE, SESSION_ID_RE, State
from pigeond.storage import SwarmRepository
from pigeond.storage.channels import JoinOutcome
from pigeond.storage.database import Database

CHANNELS_PATH = "/swarm/channels"
CHANNEL_PATH = CHANNELS_PATH + "/{channel}"
MEMBERS_PATH = CHANNEL_PATH + "/members"
MEMBER_PATH = MEMBERS_PATH + "/{session}"
HISTORY_PATH = "/swarm/channel/{channel}"
log = Logger()


async def fan_out_answer(
    db: Database, msg_id: str, kick: Callable[[str], None] | None
) -> dict[str, object]:
    """What the 202 of a channel send adds: each member's copy (``held`` when its policy
    holds it) and who was left out; ``kick`` (None for a retry) gets each member whose
    copy was just stored, so the arbiter hands it over at once."""
    fan_out = await db.read(SwarmRepository.fan_out_of, msg_id)
    deliveries = []
    for copy in fan_out.deliveries:
        assert copy.to_session is not None
        held = copy.state == State.QUEUED and copy.next_retry_at is None
        deliveries.append({"to": copy.to_session, "msg_id": copy.msg_id, "held": held})
        if kick is not None:
            kick(copy.to_session)
    return {"deliveries": deliveries, "skipped": [s.view() for s in fan_out.skipped]}


async def channel_status(db: Database, msg_id: str) -> dict[str, object]:
    """What ``GET /swarm/message/<id>`` of a channel message adds: how far each copy got."""
    fan_out = await db.read(SwarmRepository.fan_out_of, msg_id)
    return {
        "deliveries": [
            {"to": c.to_session, "msg_id": c.msg_id, "state": c.state, "receipt": c.receipt()}
            for c in fan_out.deliveries
        ],
        "skipped": [s.view() for s in fan_out.skipped],
    }


def membership(action: str, channel: str, session: str) -> OwnCall:
    """The ``swarm_channel`` call that joins or leaves ``channel`` (``action``)."""

    def matches(given: Mapping[str, Any]) -> bool:
        return given.get("action") == action and given.get("channel") == channel

    verb = "join" if action == "join" else "remove"
    what = f"{verb} it {'to' if action == 'join' else 'from'} channel {channel}"
    return OwnCall("swarm_channel", matches, what, f"channel {action} {channel} {session}")


class ChannelRoutes:
    def __init__(
        self,
        db: Database,
        clock: IReactorTime,
        config: Config,
        authority: SessionAuthority,
        liveness: SessionLiveness | None = None,
    ) -> None:
        """``config`` gives ``max_channel_members`` and ``inbox_max_bytes`` (see
        :meth:`configure`); ``liveness`` None: no opencode to ask, every session may join."""
        self.configure(config)
        self._db = db
        self._clock = clock
        self._authority = authority
        self._liveness = liveness

    def configure(self, config: Config) -> None:
        """A reload's settings, from the next request on.  A lower ``max_channel_members``
        removes nobody: it only refuses joins until the channel is below it."""
        self.max_members = config.max_channel_members
        self.page_max_bytes = config.inbox_max_bytes

    def install(self, api: JsonApi) -> JsonApi:
        api.route("GET", CHANNELS_PATH, self.list)
        api.route("GET", CHANNEL_PATH, self.members)
        api.route("POST", MEMBERS_PATH, self.join)
        api.route("DELETE", MEMBER_PATH, self.leave)
        api.route("GET", HISTORY_PATH, self.history)
        return api

    # -- membership ------------------------------------------------------------------

    async def join(self, request: server.Request, channel: str) -> JsonResponse:
        """201 when the session joined, 200 when it was a member; 409 when the channel is
        full, 404 for a name nobody holds or a session opencode does not have."""
        _check_channel(channel)
        try:
            body = decode_json_object(read_body(request))
            session, name = _parse_member(body)
        except InvalidRequest as e:
            raise HttpError(400, str(e)) from e
        call_id = call_id_of(body.get(CALL_ID_FIELD))
        if name is not None:
            session = await self._db.read(SwarmRepository.name_holder, name)
            if session is None:
                raise HttpError(404, f"nobody holds the name @{name} (see GET {NAMES_PATH})")
        assert session is not None
        if await self._gone(session):
            raise HttpError(404, f"no session {session} in opencode: it cannot join {channel}")
        joining = membership("join", channel, session)
        await self._authority.acting_for(request, session, joining, call_id)
        now_ms = int(self._clock.seconds() * 1000)
        outcome = await self._db.write(
            SwarmRepository.join_channel, channel, session, now_ms, self.max_members
        )
        if outcome is JoinOutcome.FULL:
            raise HttpError(
                409,
                f"channel {channel} is full: it has its most members"
                f" ({self.max_members}, max_channel_members)",
            )
        members = await self._db.read(SwarmRepository.channel_members, channel)
        joined = outcome is JoinOutcome.JOINED
        if joined:
            log.info("{session} joined channel {channel}", session=session, channel=channel)
        return JsonResponse(
            201 if joined else 200,
            {"channel": channel, "session": session, "joined": joined, "members": len(members)},
        )

    async def leave(self, request: server.Request, channel: str, session: str) -> JsonResponse:
        """200 when the session left; 404 when it was not a member.  Its copies already
        stored stay: they were accepted while it was one."""
        _check_channel(channel)
        if not SESSION_ID_RE.fullmatch(session):
            raise HttpError(400, f"the session in the path must match {SESSION_ID_RE.pattern}")
        leaving = membership("leave", channel, session)
        call_id = call_id_of(query_param(request, CALL_ID_FIELD))
        await self._authority.acting_for(request, session, leaving, call_id)
        if not await self._db.write(SwarmRepository.leave_channel, channel, session):
            raise HttpError(404, f"{session} is not a member of {channel}")
        log.info("{session} left channel {channel}", session=session, channel=channel)
        return JsonResponse(200, {"channel": channel, "session": session, "left": True})

    async def _gone(self, session: str) -> bool:
        """Whether opencode says now that it does not have ``session`` (404), asked afresh
        as :class:`pigeond.api.names.NamesRoute` asks of a name's holder; with no opencode
        to ask, or no clear answer, the session counts as live."""
        if self._liveness is None:
            return False
        self._liveness.invalidate(session)
        return await self._liveness.exists(session) is False

    # -- listings --------------------------------------------------------------------

    async def members(self, request: server.Request, channel: str) -> JsonResponse:
        """A channel's members in join order (none: an empty list, not a 404)."""
        _check_channel(channel)
        members = await self._db.read(SwarmRepository.channel_members, channel)
        return JsonResponse(
            200,
            {
                "channel": channel,
                "members": [m.view() for m in members],
                "max_members": self.max_members,
            },
        )

    async def list(self, request: server.Request) -> JsonResponse:
        """Every channel with members; ``?session=``: only those it is a member of."""
        session = query_param(request, "session")
        if session is not None and not SESSION_ID_RE.fullmatch(session):
            raise HttpError(400, f"query parameter 'session' must match {SESSION_ID_RE.pattern}")
        entries = await self._db.read(SwarmRepository.channels)
        if session is not None:
            joined = set(await self._db.read(SwarmRepository.channels_of, session))
            entries = [e for e in entries if e.channel in joined]
        return JsonResponse(200, {"channels": [e.view() for e in entries]})

    # -- history ---------------------------------------------------------------------

    async def history(self, request: server.Request, channel: str) -> JsonResponse:
        """A page of the channel's messages, oldest first, bounded by ``limit`` and
        ``inbox_max_bytes`` as an inbox page is; ``next_cursor`` is the last one's accept
        number, or ``since`` on an empty page."""
        _check_channel(channel)
        limit = page_limit(query_param(request, "limit"))
        since = query_param(request, "since")
        after_seq = 0 if since is None else await self._cursor_position(since)
        page = await self._db.read(
            SwarmRepository.channel_history_page, channel, after_seq, limit, self.page_max_bytes
        )
        next_cursor = since
        if page.messages:
            last_seq = page.messages[-1].accept_seq
            assert last_seq is not None
            next_cursor = encode_cursor(last_seq)
        return JsonResponse(
            200,
            {
                "messages": [m.inbox_view() for m in page.messages],
                "has_more": page.has_more,
                "next_cursor": next_cursor,
            },
        )

    async def _cursor_position(self, since: str) -> int:
        seq = cursor_number(since)
        if seq is None or seq > await self._db.read(SwarmRepository.last_accept_seq):
            raise HttpError(
                400,
                f"unknown cursor {since!r}: page a channel with the cur_N cursor from next_cursor",
            )
        return seq


def _check_channel(channel: str) -> None:
    if not CHANNEL_RE.fullmatch(channel):
        raise HttpError(400, f"the channel in the path must match {CHANNEL_RE.pattern}")


def _parse_member(body: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """Field 'session' of a join as (session, name): a session id, or ``@name``."""
    session = body.get("session")
    if isinstance(session, str) and session.startswith(NAME_MARK):
        check_name(session[len(NAME_MARK) :], "session")
        return None, session[len(NAME_MARK) :]
    if not isinstance(session, str) or not SESSION_ID_RE.fullmatch(session):
        raise InvalidRequest(
            f"field 'session' is required: a session id matching {SESSION_ID_RE.pattern}"
            f" or @name with a name matching {NAME_RE.pattern}"
        )
    return session, None
