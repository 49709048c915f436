"""``/swarm/agent/*``: the doors of the members that ask for their messages.

A Claude Code session's hooks (``pigeon-hook``) and ``pigeon-mcp`` call these; like every
route but ``/health`` they are behind the daemon's access check.

- ``POST /swarm/agent/claude/event`` ``{"event": "session_start" | "prompt_submit",
  "session", "transcript_path"}``: the session exists (and where its transcript is), or a
  person's prompt runs in it;
- ``POST /swarm/agent/claude/turn-end`` ``{"session", "transcript_path",
  "stop_hook_active"?}``: its turn ended; answered within a second with the batch handed
  off now (``{"text", "msg_ids"}``) or ``{"text": null, "msg_ids": []}``;
- ``POST /swarm/agent/wait`` ``{"session", "wait_s"}``: a channel's long wait (a Claude
  Code session), or an MCP-only member's read (``mcp_<name>``), answered the same way;
  409 in a daemon with delivery off (a Stop hook's ask is answered with nothing there).
"""

from __future__ import annotations

import os
from typing import Final, Protocol

from twisted.web import server

from pigeond.api.send_request import InvalidRequest, decode_json_object
from pigeond.api.web import HttpError, JsonApi, JsonResponse, read_body
from pigeond.model import RUNTIME_IDS, Runtime

EVENT_PATH: Final = "/swarm/agent/claude/event"
TURN_END_PATH: Final = "/swarm/agent/claude/turn-end"
WAIT_PATH: Final = "/swarm/agent/wait"
EVENTS: Final = ("session_start", "prompt_submit")
MAX_WAIT_S: Final = 30.0
MAX_PATH_CHARS: Final = 4096
NO_DELIVERY: Final = "delivery is off in this pigeond (no opencode_url): nothing is handed off"

_CLAUDE = RUNTIME_IDS[Runtime.CLAUDE]
_ASKERS = (RUNTIME_IDS[Runtime.CLAUDE], RUNTIME_IDS[Runtime.MCP])


class AgentDoors(Protocol):
    """What the routes call (:class:`pigeond.delivery.member_doors.MemberDoors`)."""

    @property
    def delivering(self) -> bool:
        """False in a daemon with delivery off: nothing can ever be handed off."""
        ...

    async def claude_event(self, session: str, event: str, transcript_path: str) -> None: ...

    async def turn_end(self, session: str, transcript_path: str) -> dict[str, object]: ...

    async def wait(self, session: str, wait_s: float) -> dict[str, object]: ...


def _claude_session(body: dict[str, object]) -> str:
    session = body.get("session")
    if not isinstance(session, str) or not _CLAUDE.fullmatch(session):
        raise InvalidRequest(
            "field 'session' is required and must be a Claude Code session id"
            f" (matching {_CLAUDE.pattern})"
        )
    return session


def _transcript_path(body: dict[str, object]) -> str:
    """An absolute path to a ``.jsonl`` file, as Claude Code names it (read by pigeond
    only to find its own envelopes: never shown, never written)."""
    path = body.get("transcript_path")
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or not path.endswith(".jsonl")
        or "\x00" in path
        or len(path) > MAX_PATH_CHARS
        or os.path.normpath(path) != path
    ):
        raise InvalidRequest(
            "field 'transcript_path' is required: the absolute, normalised path of the"
            " session's .jsonl transcript"
        )
    return path


class AgentRoutes:
    def __init__(self, doors: AgentDoors) -> None:
        self._doors = doors

    def install(self, api: JsonApi) -> JsonApi:
        api.route("POST", EVENT_PATH, self.event)
        api.route("POST", TURN_END_PATH, self.turn_end)
        api.route("POST", WAIT_PATH, self.wait)
        return api

    async def event(self, request: server.Request) -> JsonResponse:
        body = decode_json_object(read_body(request))
        event = body.get("event")
        if event not in EVENTS:
            raise InvalidRequest(f"field 'event' must be one of {', '.join(EVENTS)}")
        assert isinstance(event, str)
        session = _claude_session(body)
        await self._doors.claude_event(session, event, _transcript_path(body))
        return JsonResponse(200, {"session": session, "runtime": Runtime.CLAUDE.value})

    async def turn_end(self, request: server.Request) -> JsonResponse:
        body = decode_json_object(read_body(request))
        session = _claude_session(body)
        active = body.get("stop_hook_active", False)
        if not isinstance(active, bool):
            raise InvalidRequest("field 'stop_hook_active' must be true or false")
        return JsonResponse(200, await self._doors.turn_end(session, _transcript_path(body)))

    async def wait(self, request: server.Request) -> JsonResponse:
        body = decode_json_object(read_body(request))
        session = body.get("session")
        if not isinstance(session, str) or not any(p.fullmatch(session) for p in _ASKERS):
            raise InvalidRequest(
                "field 'session' is required: a Claude Code session id, or mcp_<name>"
            )
        wait_s = body.get("wait_s", 0)
        if (
            isinstance(wait_s, bool)
            or not isinstance(wait_s, int | float)
            or not 0 <= wait_s <= MAX_WAIT_S
        ):
            raise InvalidRequest(f"field 'wait_s' must be a number from 0 to {MAX_WAIT_S:g}")
        if not self._doors.delivering:  # a wait would last its whole wait_s, every time
            raise HttpError(409, NO_DELIVERY)
        return JsonResponse(200, await self._doors.wait(session, float(wait_s)))
