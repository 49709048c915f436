"""Threads and brake holds over HTTP: which thread a send joins, and a person's decisions.

``GET /swarm/threads`` lists threads newest first (hops, turns, messages, held);
``GET /swarm/held`` lists what the conversation brakes hold for a person;
``POST /swarm/held/<msg_id>/release`` (``{"mode": "reset" | "raise" | "once", "by": N}``,
``reset`` when omitted) delivers one, and ``POST /swarm/held/<msg_id>/drop`` cancels it
and tells its sender ("dropped by a person").  ``pigeon held``, ``pigeon release`` and
``pigeon drop`` do the same on the database directly (pigeond/cli/pigeon_held.py); the
storage package makes each decision one conditional transaction, whoever asks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web import server

from pigeond.api.send_request import InvalidRequest, SendRequest, decode_json_object
from pigeond.api.web import HttpError, JsonApi, JsonResponse, query_param, read_body
from pigeond.ids import make_thread_id
from pigeond.model import MSG_ID_RE, THREAD_RE, Hold, StoredMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.brake_holds import HELD_LIMIT, HoldOutcome, ReleaseMode
from pigeond.storage.database import Database
from pigeond.storage.thread_costs import thread_view, threads_with_costs
from pigeond.storage.threads import THREADS_LIMIT

THREADS_PATH = "/swarm/threads"
HELD_PATH = "/swarm/held"
RELEASE_PATH = "/swarm/held/{msg_id}/release"
DROP_PATH = "/swarm/held/{msg_id}/drop"
# The most a release may raise a thread's limit by at once.
MAX_RAISE = 1_000_000
log = Logger()


async def thread_for(db: Database, send: SendRequest, now_ms: int) -> str:
    """The thread a send joins: the one it names, else its reply_to's (when that message is
    stored and has one), else a new one."""
    if send.thread is not None:
        return send.thread
    reply_to = send.message.reply_to
    if reply_to is not None:
        found = await db.read(SwarmRepository.thread_of, reply_to)
        if found is not None:
            return found
    return make_thread_id(now_ms)


def hold_view(hold: Hold) -> dict[str, object]:
    """A hold as the 202 of a held send says it."""
    return {"brake": hold.brake, "reason": hold.reason}


def stored_hold(message: StoredMessage) -> Hold | None:
    """The brake hold a stored message is under now (a retried send's answer), else None."""
    if not message.brake_held:
        return None
    return Hold(message.hold_brake or "", message.hold_reason or "")


def message_thread_fields(message: StoredMessage) -> dict[str, object]:
    """What ``GET /swarm/message`` adds: the thread, and the hold it is under, if any."""
    hold = None
    if message.hold_kind is not None:
        reason = message.hold_reason if message.brake_held else message.last_error
        hold = {"kind": message.hold_kind, "brake": message.hold_brake if message.brake_held
                else None, "reason": reason}  # fmt: skip
    return {"thread": message.thread_id, "hold": hold}


def _limit(request: server.Request, default: int) -> int:
    raw = query_param(request, "limit")
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= default:
        raise HttpError(400, f"query parameter 'limit' must be an integer from 1 to {default}")
    return int(raw)


def _release_body(raw: bytes) -> tuple[ReleaseMode, int]:
    """A release's mode and its N (0 but for raise); 400 for anything else."""
    body: dict[str, Any] = decode_json_object(raw) if raw.strip() else {}
    mode_text = body.get("mode", ReleaseMode.RESET.value)
    modes = ", ".join(m.value for m in ReleaseMode)
    if not isinstance(mode_text, str) or mode_text not in {m.value for m in ReleaseMode}:
        raise InvalidRequest(f"field 'mode' must be one of: {modes}")
    mode = ReleaseMode(mode_text)
    by = body.get("by")
    if mode is not ReleaseMode.RAISE:
        if by is not None:
            raise InvalidRequest("field 'by' goes with mode 'raise' only")
        return mode, 0
    if isinstance(by, bool) or not isinstance(by, int) or not 1 <= by <= MAX_RAISE:
        raise InvalidRequest(f"mode 'raise' needs field 'by', an integer from 1 to {MAX_RAISE}")
    return mode, by


class ThreadRoutes:
    def __init__(
        self,
        db: Database,
        clock: IReactorTime,
        on_released: Callable[[str], None] = lambda target: None,
    ) -> None:
        """``on_released`` is told the target of a released message (the arbiter's kick)."""
        self._db = db
        self._clock = clock
        self._on_released = on_released

    def install(self, api: JsonApi) -> JsonApi:
        api.route("GET", THREADS_PATH, self.threads)
        api.route("GET", HELD_PATH, self.held)
        api.route("POST", RELEASE_PATH, self.release)
        api.route("POST", DROP_PATH, self.drop)
        return api

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    async def threads(self, request: server.Request) -> JsonResponse:
        listed = await self._db.read(threads_with_costs, _limit(request, THREADS_LIMIT))
        return JsonResponse(200, {"threads": [thread_view(t, c) for t, c in listed]})

    async def held(self, request: server.Request) -> JsonResponse:
        thread = query_param(request, "thread")
        if thread is not None and not THREAD_RE.fullmatch(thread):
            raise HttpError(400, f"query parameter 'thread' must match {THREAD_RE.pattern}")
        limit = _limit(request, HELD_LIMIT)
        listed = await self._db.read(SwarmRepository.held_messages, limit, thread)
        return JsonResponse(200, {"held": [h.view() for h in listed]})

    @staticmethod
    def _check(msg_id: str) -> None:
        if not MSG_ID_RE.fullmatch(msg_id):
            raise HttpError(400, f"msg_id must match {MSG_ID_RE.pattern}")

    async def _refused(self, msg_id: str, outcome: HoldOutcome) -> HttpError:
        if outcome is HoldOutcome.UNKNOWN:
            return HttpError(404, f"no message {msg_id}", {"msg_id": msg_id})
        message = await self._db.read(SwarmRepository.get, msg_id)
        if outcome is HoldOutcome.NOT_RAISABLE:
            brake = "its brake" if message is None else f"brake {message.hold_brake}"
            return HttpError(
                400, f"{brake} has no limit to raise; release with mode reset or once",
                {"msg_id": msg_id},
            )  # fmt: skip
        state = "unknown" if message is None else message.state
        kind = (
            "" if message is None or message.hold_kind is None else f", held by {message.hold_kind}"
        )
        return HttpError(
            409, f"{msg_id} is not held by a brake (state {state}{kind})",
            {"msg_id": msg_id, "state": state},
        )  # fmt: skip

    async def release(self, request: server.Request, msg_id: str) -> JsonResponse:
        self._check(msg_id)
        try:
            mode, by = _release_body(read_body(request))
        except InvalidRequest as e:
            raise HttpError(400, str(e)) from e
        done = await self._db.write(
            SwarmRepository.release_brake_hold, msg_id, mode, by, self._now_ms()
        )
        if done.outcome is not HoldOutcome.DONE:
            raise await self._refused(msg_id, done.outcome)
        log.info("{msg_id} released by a person ({mode})", msg_id=msg_id, mode=mode.value)
        if done.target is not None:
            self._on_released(done.target)
        return JsonResponse(200, {"msg_id": msg_id, "released": True, "mode": mode.value,
                                  "by": by})  # fmt: skip

    async def drop(self, request: server.Request, msg_id: str) -> JsonResponse:
        self._check(msg_id)
        outcome = await self._db.write(SwarmRepository.drop_brake_hold, msg_id, self._now_ms())
        if outcome is not HoldOutcome.DONE:
            raise await self._refused(msg_id, outcome)
        log.info("{msg_id} dropped by a person", msg_id=msg_id)
        return JsonResponse(200, {"msg_id": msg_id, "dropped": True})
