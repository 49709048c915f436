"""An opencode 2.x's event stream (``GET /api/event``), read as a hint, never as a record.

The 2.x stream is volatile by contract: a slow reader is dropped and nothing is replayed.
So nothing here is a receipt: whether a hand-off was seen and answered is still read from
the transcript (:mod:`pigeond.delivery.opencode_v2_transcript`).  What the stream gives
is *when* to read:

* a session going idle (``session.idle``, or ``session.status`` with ``{"type":
  "idle"}``: the v2 types' ``SessionIdle`` and ``SessionStatus2``) counts a turn end for
  it (:meth:`V2Events.turns_ended`, the verifier's count for a 2.x target, None while
  the stream is down so that the verifier looks every interval) and asks the verifier to
  look now (``on_idle``);
* a permission asked or replied (``permission.v2.asked``, ``permission.v2.replied``)
  asks the permission watch to poll its lists at its next tick (``on_permission``);
* a session last said idle (no event of it since) is :meth:`V2Events.known_idle`: a
  permission request of it still listed belongs to a turn that ended (aborted), and is
  stale.  Any other event naming the session (a step, a status that is not idle, a
  permission asked) ends that, so a live turn's request is never taken for a stale one.

The stream is opened through the 1.x client's connection to opencode, with the password,
and only while the dialect's verdict is 2.x (a 1.x is never asked anything under
``/api/``): while it is not, it waits for the verdict to find a 2.x (asking opencode
nothing, and with no timer of its own: an idle daemon wakes for nothing).  A stream
that lasted is reopened at once; one that fails soon after opening waits each step of a
bounded backoff in turn
(the 1.x stream's, :data:`RECONNECT_BACKOFF_S`); while opencode is unreachable it waits
for its return.  No 2.x heartbeat is known: a stream silent for :data:`SILENT_S` is
opened anew (once every five minutes on a quiet server), so that a connection gone
without closing hides turn ends for that long at most.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.web.iweb import IResponse

from pigeond.delivery.events import HEALTHY_S, RECONNECT_BACKOFF_S, Outages, ServerSentEvents
from pigeond.delivery.turns import TurnCount

log = Logger(namespace="pigeond.delivery.events")  # one story with the 1.x stream's lines

SILENT_S = 300.0
"""A stream silent this long is opened anew: no 2.x heartbeat is known, and a connection
gone without closing would hide every turn end (the verifier waits for one to look)."""
IDLE_EVENTS = ("session.idle",)
PERMISSION_EVENTS = ("permission.v2.asked", "permission.v2.replied")


class FoundV2(Protocol):
    """The verdict (:class:`~pigeond.delivery.api_support.ApiSupport`): the 2.x found."""

    @property
    def v2_version(self) -> str | None: ...

    def when_v2(self) -> Deferred[None]: ...


class V2StreamSource(Protocol):
    """Where the stream comes from (:class:`~pigeond.delivery.opencode_client.OpencodeClient`)."""

    @property
    def base_url(self) -> str: ...

    async def open_v2_event_stream(self) -> IResponse: ...


def event_of(data: str) -> tuple[str, str | None, str | None] | None:
    """``(type, session, status)`` of one event (``status``: a ``session.status``'s
    type); None for what is not a 2.x event (``{"type", "data": {...}}``)."""
    try:
        event = json.loads(data)
    except ValueError:
        return None
    kind = event.get("type") if isinstance(event, dict) else None
    payload = event.get("data") if isinstance(event, dict) else None
    if not isinstance(kind, str) or not isinstance(payload, dict):
        return None
    session = payload.get("sessionID")
    status = payload.get("status")
    state = status.get("type") if isinstance(status, dict) else None
    return (
        kind,
        session if isinstance(session, str) else None,
        state if isinstance(state, str) else None,
    )


@dataclass(slots=True)
class _Session:
    idle: bool | None = None  # the last event of it said idle (None: not known)
    ended: int = 0  # turn ends seen


class V2Events:
    """The 2.x stream's hints; :meth:`start` it once, :meth:`stop` it at shutdown."""

    def __init__(
        self,
        source: V2StreamSource,
        dialect: FoundV2,
        clock: IReactorTime,
        *,
        on_idle: Callable[[str], None] = lambda session: None,
        on_permission: Callable[[], None] = lambda: None,
        backoff_s: tuple[float, ...] = RECONNECT_BACKOFF_S,
        outages: Outages | None = None,
    ) -> None:
        self._source = source
        self._dialect = dialect
        self._clock = clock
        self._on_idle = on_idle
        self._on_permission = on_permission
        self._backoff_s = backoff_s
        self._outages = outages
        self._sessions: dict[str, _Session] = {}
        self._connections = 0
        self._protocol: ServerSentEvents | None = None
        self._sleep: Deferred[None] | None = None
        self._stopped = True
        self._trouble = False  # the stream's failure was said (once per spell)
        self._heard_at = 0.0  # when the stream last sent anything
        self._watch: IDelayedCall | None = None  # the next look at its silence
        self.connected = False

    def listen(self, on_idle: Callable[[str], None], on_permission: Callable[[], None]) -> None:
        """Who is told of a session going idle, and of a permission asked or replied."""
        self._on_idle = on_idle
        self._on_permission = on_permission

    @property
    def active(self) -> bool:
        """Whether opencode is found to be a 2.x (then its targets' turn ends are counted
        here, not by the 1.x tracker)."""
        return self._dialect.v2_version is not None

    def turns_ended(self, session: str) -> TurnCount | None:
        """A count that changes whenever a turn of ``session`` may have ended; None while
        the stream is down (any moment may have ended one)."""
        if not self.connected:
            return None
        return self._connections, self._sessions.get(session, _Session()).ended

    def known_idle(self, session: str) -> bool:
        """Whether the stream runs and its last word on ``session`` was that it is idle."""
        return self.connected and self._sessions.get(session, _Session()).idle is True

    def start(self) -> None:
        self._stopped = False
        Deferred.fromCoroutine(self._run()).addErrback(
            lambda f: log.failure("2.x event stream loop died", f)
        )

    def stop(self) -> None:
        """At shutdown: any wait cut short, the stream closed, nothing opened again."""
        self._stopped = True
        sleep, protocol = self._sleep, self._protocol
        if sleep is not None and not sleep.called:
            sleep.cancel()
        if protocol is not None:
            protocol.close()

    def _ended(self) -> bool:
        return self._stopped

    async def _run(self) -> None:
        failures = 0
        while not self._ended():
            if self._dialect.v2_version is None:  # a 1.x (or not known): asked nothing
                if await self._pause(self._dialect.when_v2()):
                    return
                continue
            opened_at = self._clock.seconds()
            try:
                await self._listen_once()
                reason = "closed by opencode"
            except CancelledError:
                return
            except Exception as e:  # any failure to open or read: the stream is tried again
                reason = f"{type(e).__name__}: {e}"
            self._set_connected(False)
            if self._ended():
                return
            if self._outages is not None and self._outages.down:
                log.debug("2.x event stream down ({reason}); waiting for opencode", reason=reason)
                failures = 0
                wait = self._outages.when_back()
            else:
                failures = 0 if self._clock.seconds() - opened_at > HEALTHY_S else failures + 1
                delay = self._backoff_s[min(failures, len(self._backoff_s)) - 1] if failures else 0
                self._said_down(reason, delay)
                wait = deferLater(self._clock, delay, lambda: None)
            if await self._pause(wait):
                return

    async def _pause(self, wait: Deferred[None]) -> bool:
        """Wait; True when stopped meanwhile."""
        self._sleep = wait
        try:
            await wait
        except CancelledError:
            return True
        return self._ended()

    def _said_down(self, reason: str, delay: float) -> None:
        """The first failure of a spell is one info line (turns are looked for every
        interval meanwhile); the retries are debug lines."""
        if self._trouble:
            log.debug("2.x event stream still down ({reason}); again in {delay} s",
                      reason=reason, delay=delay)  # fmt: skip
            return
        self._trouble = True
        log.info("2.x event stream down ({reason}); reconnecting, transcripts read every"
                 " verify_interval_s meanwhile", reason=reason)  # fmt: skip

    async def _listen_once(self) -> None:
        response = await self._source.open_v2_event_stream()
        protocol = ServerSentEvents(self._handle, self._heard)
        self._protocol = protocol
        response.deliverBody(protocol)
        self._set_connected(True)
        self._heard()
        self._watch = self._clock.callLater(SILENT_S, self._silent, protocol)
        try:
            await protocol.finished
        finally:
            self._protocol = None
            if self._watch.active():
                self._watch.cancel()

    def _heard(self) -> None:
        self._heard_at = self._clock.seconds()

    def _silent(self, protocol: ServerSentEvents) -> None:
        """A stream silent for :data:`SILENT_S` is opened anew (a connection that died
        without closing would hide every turn end); otherwise looked at again then."""
        quiet_s = self._clock.seconds() - self._heard_at
        if quiet_s < SILENT_S:
            self._watch = self._clock.callLater(SILENT_S - quiet_s, self._silent, protocol)
            return
        log.debug("2.x event stream silent for {s} s; opening it anew", s=SILENT_S)
        protocol.close()

    def _set_connected(self, connected: bool) -> None:
        if connected == self.connected:
            return
        self.connected = connected
        if not connected:
            return
        self._connections += 1
        self._sessions.clear()  # what was said before the stream opened may be stale
        url = f"{self._source.base_url}/api/event"
        if self._connections == 1 or self._trouble:
            log.info("2.x event stream connected: {url} (a hint; answers are read from"
                     " transcripts)", url=url)  # fmt: skip
        else:
            log.debug("2.x event stream connected again: {url}", url=url)
        self._trouble = False

    def _handle(self, data: str) -> None:
        if self._dialect.v2_version is None and self._protocol is not None:
            self._protocol.close()  # no longer a 2.x: its stream is not read on
            return
        event = event_of(data)
        if event is None:
            return
        kind, session, status = event
        if kind in PERMISSION_EVENTS:
            self._on_permission()
        if session is None:
            return
        state = self._sessions.setdefault(session, _Session())
        if kind in IDLE_EVENTS or (kind == "session.status" and status == "idle"):
            if state.idle is not True:
                state.idle = True
                state.ended += 1
                self._on_idle(session)
        else:
            state.idle = False  # anything else of it: a turn may run
