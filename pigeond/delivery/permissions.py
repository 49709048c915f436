"""Permission requests a session waits on while it handles a swarm message.

opencode asks before a tool runs when its config says ``ask`` (``bash``, an edit, …) and
then waits, with no timeout, for an answer.  A session woken by a swarm message has
nobody at its terminal to give one: the turn stalls, and so does the sender waiting for
its reply.  This watch records such requests (``swarm_permissions``) with the message and
sender being handled, and answers them for the operator.  What opencode sends, on 1.18.33
and 1.15.4, is in notes/permissions.md:

- ``permission.asked`` (on ``/global/event``: the envelope's ``directory`` is the instance
  that holds the request, which must be named when answering) is recorded when the
  session is handling a swarm message: a hand-off to it within ``turn_timeout_s`` that no
  turn answered yet (the newest).  A request of a session that handles none (its person's
  own prompt) is not pigeond's business, and not recorded.
- ``permission.replied`` (key ``requestID``), whoever answered, removes it.
- Events are lost while the stream is down: at start, at each reconnect and while the
  stream is down, at most :data:`DIRECTORIES_PER_POLL` instances are asked for their
  pending list (``GET /permission``) on the verify tick, at most every
  ``verify_interval_s``; so are the instances of the requests still open, which drops
  those answered or lost meanwhile (an opencode restart forgets them).
- A request whose session went idle (its turn was aborted) is stale: opencode keeps
  listing it, and 1.18.33 would still run the aborted command if it were answered.  It
  is dropped, and never answered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.internet.defer import Deferred, DeferredLock
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from pigeond.config import Config
from pigeond.delivery.answers import consumers_in
from pigeond.delivery.failures import FailureKind
from pigeond.delivery.opencode_client import OpencodeError
from pigeond.delivery.opencode_transcript import RECENT_MESSAGES, envelope_homes
from pigeond.model import PermissionAnswerOutcome
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database
from pigeond.storage.permissions import PermissionRequest

log = Logger()

# How long a closed request's id is remembered: an ask looked at again, or a poll's list
# taken before the close, must not record it again.
CLOSED_KEPT_S = 600.0
# The most opencode instances (directories) asked for their pending list on one poll, and
# the most sessions with unanswered hand-offs whose directories a re-check looks up.
DIRECTORIES_PER_POLL = 8
SESSIONS_PER_RECHECK = 64


@dataclass(frozen=True, slots=True)
class Asked:
    """A pending request as opencode shows it (an event's ``properties``, or one entry of
    ``GET /permission``), and the instance that holds it."""

    request_id: str
    session: str
    directory: str
    permission: str
    patterns: tuple[str, ...]
    always: tuple[str, ...]
    call_id: str | None
    message_id: str | None  # the assistant message (the step of the turn) that asks


def _texts(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def asked_in(props: object, directory: str) -> Asked | None:
    """The request in ``props`` (``permission.asked``'s properties, or a listed entry)."""
    if not isinstance(props, dict):
        return None
    rid, session, permission = props.get("id"), props.get("sessionID"), props.get("permission")
    if not (isinstance(rid, str) and isinstance(session, str) and isinstance(permission, str)):
        return None
    tool = props.get("tool")
    call_id, message_id = (
        (tool.get("callID"), tool.get("messageID")) if isinstance(tool, dict) else (None, None)
    )
    return Asked(
        rid, session, directory, permission, _texts(props.get("patterns")),
        _texts(props.get("always")), call_id if isinstance(call_id, str) else None,
        message_id if isinstance(message_id, str) else None,
    )  # fmt: skip


def asked_of(event: Any) -> Asked | None:
    """The request of a ``permission.asked`` event on ``/global/event``; None for anything
    else, or one without the instance's directory (it could not be answered)."""
    if not isinstance(event, dict) or not isinstance(event.get("directory"), str):
        return None
    payload = event.get("payload")
    if not isinstance(payload, dict) or payload.get("type") != "permission.asked":
        return None
    return asked_in(payload.get("properties"), event["directory"])


def replied_of(event: Any) -> str | None:
    """The request id a ``permission.replied`` event closes (either stream shape)."""
    payload = event.get("payload", event) if isinstance(event, dict) else None
    if not isinstance(payload, dict) or payload.get("type") != "permission.replied":
        return None
    props = payload.get("properties")
    rid = props.get("requestID") if isinstance(props, dict) else None
    return rid if isinstance(rid, str) else None


class PermissionApi(Protocol):
    """opencode's permission routes (:class:`~pigeond.delivery.opencode_client.OpencodeClient`)."""

    async def pending_permissions(self, directory: str) -> list[dict[str, Any]]: ...

    async def reply_permission(self, request_id: str, directory: str, reply: str) -> bool: ...

    async def messages(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]: ...


class PermissionWatch:
    def __init__(
        self,
        db: Database,
        api: PermissionApi,
        clock: IReactorTime,
        config: Config,
        *,
        directory_of: Callable[[str], Awaitable[str]],
        known_idle: Callable[[str], bool] = lambda session: False,
        stream_connected: Callable[[], bool] = lambda: False,
        mine: Callable[[str], Awaitable[bool]] | None = None,
        opencode_down: Callable[[], bool] = lambda: False,
    ) -> None:
        """``directory_of`` is a session's own directory (the registry); ``known_idle``
        says its turn is known to be over (:meth:`TurnTracker.known_idle`); ``mine``
        (on a database several daemons share: :meth:`Routing.mine`) leaves the sessions
        of another daemon's opencode to it; while ``opencode_down`` (an outage, probed
        elsewhere) no poll is made: an outage costs one probe at a time, not a poll too."""
        self._mine = mine
        self._opencode_down = opencode_down
        self._db = db
        self._api = api
        self._clock = clock
        self._directory_of = directory_of
        self._known_idle = known_idle
        self._stream_connected = stream_connected
        self.configure(config)
        self._lock = DeferredLock()  # records and closes apply in the order they came
        self._recheck = True  # at start: what was asked or answered while pigeond was down
        self._last_poll: float | None = None
        self._polling: Deferred[None] | None = None
        self._closed_at: dict[str, float] = {}  # request id -> when closed, for CLOSED_KEPT_S
        self._later: set[IDelayedCall] = set()  # asks looked at again (see _record)

    def configure(self, config: Config) -> None:
        """A reload's settings, from the next event or poll on."""
        self._window_ms = int(config.turn_timeout_s * 1000)
        self._poll_s = config.verify_interval_s

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    # -- events ------------------------------------------------------------------

    def observe(self, event: dict[str, Any]) -> None:
        """A ``permission.*`` event from the stream."""
        asked = asked_of(event)
        if asked is not None:
            self._serially(self._record, asked)
            return
        rid = replied_of(event)
        if rid is not None:
            self._serially(self._close, rid, "answered")

    def stream_state(self, connected: bool) -> None:
        """A stream (re)connected may have missed events: look again at the next tick."""
        if connected:
            self._recheck = True

    def poll_soon(self) -> None:
        """A hint that a request was asked or answered (a 2.x's event stream): poll at the
        next tick, not ``verify_interval_s`` after the last poll."""
        self._last_poll = None

    def _serially(self, step: Callable[..., Awaitable[None]], *args: Any) -> Deferred[None]:
        async def run() -> None:
            try:
                await step(*args)
            except Exception as e:  # a failed write is retried by the next poll
                log.warn("permission watch: {error}", error=f"{type(e).__name__}: {e}")

        done: Deferred[None] = self._lock.run(lambda: Deferred.fromCoroutine(run()))
        return done

    async def _record(self, asked: Asked, again: bool = True) -> None:
        """Record ``asked`` if its turn handles a swarm message.  An ask that finds no hand-off
        is looked at once more ``verify_interval_s`` later: the ask may come before the
        hand-off that started its turn is recorded (a fast model, a busy database)."""
        if not again and asked.request_id in self._closed_at:
            return  # answered meanwhile
        if self._known_idle(asked.session):
            return  # a stale request of an aborted turn: never offered
        handled = await self._db.read(
            SwarmRepository.handling, asked.session, self._now_ms() - self._window_ms
        )
        if handled and asked.message_id is not None:
            handled = await self._in_this_turn(asked, asked.message_id, handled)
        if not handled:
            log.debug("{session} asks permission, handling no swarm message", session=asked.session)
            if again:
                self._look_again(asked)
            return
        msg_id, sender = handled[0]
        request = PermissionRequest(
            asked.request_id, asked.session, asked.directory, asked.permission, asked.patterns,
            asked.always, asked.call_id, msg_id, sender, self._now_ms(),
        )  # fmt: skip
        if await self._db.write(SwarmRepository.record_permission, request):
            log.info("{line}", line=request.describe())

    def _look_again(self, asked: Asked) -> None:
        def fire() -> None:
            self._later.discard(call)
            self._serially(self._record, asked, False)

        call = self._clock.callLater(self._poll_s, fire)
        self._later.add(call)

    def close(self) -> None:
        """At shutdown: no ask is looked at again (the database closes)."""
        for call in self._later:
            if call.active():
                call.cancel()
        self._later.clear()

    async def _in_this_turn(
        self, asked: Asked, message_id: str, handled: list[tuple[str, str]]
    ) -> list[tuple[str, str]]:
        """Of the hand-offs ``handled`` (newest first), those the asking turn consumed, by
        the transcript: the asking step's parent is the user message whose turn it is.  A
        hand-off whose envelope is not among the messages read stays a candidate; one
        consumed by another turn (the person's own prompt came after it) does not.  When
        the transcript cannot be read, every candidate stays (the newest is taken)."""
        try:
            messages = await self._api.messages(asked.session, asked.directory, RECENT_MESSAGES)
        except OpencodeError:
            return handled
        parents = [m["info"].get("parentID") for m in messages if m["info"].get("id") == message_id]
        if not parents or not isinstance(parents[0], str):
            return handled
        homes = {m: h for m, h in envelope_homes(messages).items() if h is not None}
        consumed, _ = consumers_in(messages, homes)
        return [(m, s) for m, s in handled if consumed.get(m, parents[0]) == parents[0]]

    async def _close(self, request_id: str, why: str) -> None:
        self._closed_at[request_id] = self._clock.seconds()
        if await self._db.write(SwarmRepository.close_permission, request_id):
            log.info("permission {rid}: {why}", rid=request_id, why=why)

    # -- polls ---------------------------------------------------------------------

    def tick(self) -> None:
        """On the verify tick: poll when due (see the module's docstring)."""
        if self._polling is not None or self._opencode_down():
            return
        now = self._clock.seconds()
        if self._last_poll is not None and now - self._last_poll < self._poll_s:
            return
        self._last_poll = now
        self._polling = Deferred.fromCoroutine(self._poll())
        self._polling.addErrback(lambda f: log.failure("permission poll failed", f))
        self._polling.addBoth(self._poll_done)

    def _poll_done(self, result: object) -> None:
        self._polling = None

    async def _poll(self) -> None:
        started = self._clock.seconds()
        open_rows = [
            row
            for row in await self._db.read(SwarmRepository.open_permissions)
            if self._mine is None or await self._mine(row.session)
        ]
        directories: dict[str, set[str]] = {}
        for row in open_rows:
            directories.setdefault(row.directory, set()).add(row.session)
        recheck = self._recheck
        if recheck or not self._stream_connected():
            self._recheck = False
            await self._add_handling(directories)
        for directory in sorted(directories)[:DIRECTORIES_PER_POLL]:
            try:
                pending = await self._api.pending_permissions(directory)
            except OpencodeError as e:
                log.debug("permissions of {d}: {e}", d=directory, e=str(e))
                continue
            listed = [a for a in (asked_in(p, directory) for p in pending) if a is not None]
            await self._apply(directory, directories[directory], listed, open_rows, started)
        kept = self._clock.seconds() - CLOSED_KEPT_S
        self._closed_at = {r: t for r, t in self._closed_at.items() if t >= kept}
        if recheck and open_rows:  # a start, or a reconnect: what became of the open ones
            still = len(await self._db.read(SwarmRepository.open_permissions))
            log.info("permission requests re-checked: {still} of {n} still open",
                     still=still, n=len(open_rows))  # fmt: skip

    async def _add_handling(self, directories: dict[str, set[str]]) -> None:
        """Add the instances of the sessions handling swarm messages now."""
        since = self._now_ms() - self._window_ms
        unseen = await self._db.read(SwarmRepository.verification_targets)
        unanswered = await self._db.read(SwarmRepository.unanswered_targets, since)
        for session in sorted(set(unseen) | set(unanswered))[:SESSIONS_PER_RECHECK]:
            if not session.startswith("ses_") or (
                self._mine is not None and not await self._mine(session)
            ):
                continue  # only opencode's sessions ask this way, and ours only
            try:
                directory = await self._directory_of(session)
            except Exception:
                continue  # gone, or opencode away: the next recheck
            directories.setdefault(directory, set()).add(session)

    async def _apply(
        self, directory: str, sessions: set[str], listed: list[Asked],
        open_rows: list[PermissionRequest], started: float,
    ) -> None:  # fmt: skip
        """What one instance's list says: open rows it no longer has are closed; requests
        of the sessions looked for that are not recorded yet are recorded."""
        ids = {a.request_id for a in listed}
        for row in open_rows:
            if row.directory != directory:
                continue
            if row.request_id not in ids and row.asked_at < started * 1000:
                await self._serially(self._close, row.request_id, "no longer pending in opencode")
            elif self._known_idle(row.session):
                await self._serially(self._close, row.request_id, "its turn ended (stale)")
        recorded = {row.request_id for row in open_rows}
        for asked in listed:
            closed = self._closed_at.get(asked.request_id, started - 1) >= started
            fresh = asked.request_id not in recorded and not closed
            if fresh and asked.session in sessions:
                await self._serially(self._record, asked)

    # -- the operator's answer -----------------------------------------------------

    async def answer(self, request_id: str, reply: str) -> tuple[PermissionAnswerOutcome, str]:
        """Answer an open request in opencode (``reply``: once, always or reject); the
        outcome and a line saying it."""
        request = await self._db.read(SwarmRepository.open_permission, request_id)
        if request is None:
            return PermissionAnswerOutcome.UNKNOWN, f"no open permission request {request_id}"
        if self._known_idle(request.session):
            await self._serially(self._close, request_id, "its turn ended (stale)")
            return PermissionAnswerOutcome.TURN_ENDED, (
                f"{request.session}'s turn has ended (aborted?): {request_id} is stale and"
                " was not answered"
            )
        try:
            taken = await self._api.reply_permission(request_id, request.directory, reply)
        except OpencodeError as e:
            outcome = (
                PermissionAnswerOutcome.UNREACHABLE
                if e.kind is FailureKind.OUTAGE
                else PermissionAnswerOutcome.REFUSED
            )
            return outcome, f"opencode did not take the answer: {e}"
        if not taken:
            await self._serially(self._close, request_id, "gone from opencode")
            return PermissionAnswerOutcome.GONE, (
                f"opencode no longer has {request_id}: answered at {request.session}'s"
                " terminal, or opencode restarted"
            )
        await self._serially(self._close, request_id, f"answered {reply} by the operator")
        return PermissionAnswerOutcome.ANSWERED, f"{request_id}: answered {reply}"
