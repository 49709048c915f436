"""One connection to opencode's ``GET /global/event`` stream for every target.

Only ``session.status`` and ``session.idle`` matter here: they feed the
:class:`~pigeond.delivery.turns.TurnTracker`.  A dropped stream is reopened at once, then
with a backoff (:data:`RECONNECT_BACKOFF_S`) while opencode answers other calls; while
opencode is unreachable the stream waits for its return (probed, and the outage logged,
by :mod:`pigeond.delivery.reachability`) and reconnects the moment it answers.  A stream
silent for longer than ``stale_s`` (opencode sends a heartbeat every 15 s) is dropped
and reopened.  While it is down the tracker polls instead.

The log tells the stream's own trouble once: a stream that cannot be opened twice in a
row while opencode answers (once may be a kept connection gone stale) is one warning,
and its return one line with how long it was down.  An opencode 2.x has no such stream:
that is one info line, and the stream is tried again (asking opencode nothing while it
is still found to be a 2.x) at the longest backoff.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import Protocol as TransportProtocol
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IResponse

from pigeond.delivery.opencode_errors import SpeaksV2
from pigeond.delivery.reachability import how_long

log = Logger()

# The waits before reopening a stream that failed again soon after it opened, while
# opencode answers other calls (turns are polled meanwhile); the last repeats.  An
# unreachable opencode is waited for instead, and the stream reopened once it answers.
RECONNECT_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
# A stream that lasted this long was healthy: the next failure starts the backoff afresh.
HEALTHY_S = 30.0
_MAX_LINE = 4 * 1024 * 1024
# The event types read here; any other event (most of them: a turn streams its text as
# message.part.* deltas) is dropped before it is parsed as JSON.
_WANTED = (
    '"session.status"', '"session.idle"', '"message.updated"', '"permission.asked"',
    '"permission.replied"',
)  # fmt: skip
# Passed on whole to the permission watch (pigeond/delivery/permissions.py).
PERMISSION_EVENTS = ("permission.asked", "permission.replied")


def session_status_of(event: Any) -> tuple[str, str] | None:
    """``(session, status)`` for a status event of either stream shape, else None."""
    if not isinstance(event, dict):
        return None
    payload = event.get("payload", event)
    if not isinstance(payload, dict):
        return None
    kind = payload.get("type")
    props = payload.get("properties")
    if not isinstance(props, dict) or not isinstance(props.get("sessionID"), str):
        return None
    if kind == "session.idle":
        return props["sessionID"], "idle"
    if kind == "session.status":
        status = props.get("status")
        if isinstance(status, dict) and isinstance(status.get("type"), str):
            return props["sessionID"], status["type"]
    return None


def is_permission_event(event: Any) -> bool:
    """Whether ``event`` (of either stream shape) is a permission asked or replied."""
    payload = event.get("payload", event) if isinstance(event, dict) else None
    return isinstance(payload, dict) and payload.get("type") in PERMISSION_EVENTS


def user_message_of(event: Any) -> tuple[str, dict[str, Any]] | None:
    """``(session, info)`` for a ``message.updated`` event about a user message, else None:
    it tells which agent and model the session's person (or pigeond) just prompted with."""
    if not isinstance(event, dict):
        return None
    payload = event.get("payload", event)
    if not isinstance(payload, dict) or payload.get("type") != "message.updated":
        return None
    props = payload.get("properties")
    info = props.get("info") if isinstance(props, dict) else None
    if not isinstance(info, dict) or info.get("role") != "user":
        return None
    session = info.get("sessionID")
    return (session, info) if isinstance(session, str) else None


class ServerSentEvents(TransportProtocol):
    """Splits a response body into SSE ``data:`` payloads."""

    def __init__(self, on_data: Callable[[str], None], on_bytes: Callable[[], None]) -> None:
        self.on_data = on_data
        self.on_bytes = on_bytes
        self.buffer = b""
        self.payload_lines: list[str] = []
        self.finished: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.on_bytes()
        self.buffer += data
        if len(self.buffer) > _MAX_LINE:
            log.warn("event stream line over {n} bytes; dropping the connection", n=_MAX_LINE)
            self.close()
            return
        *lines, self.buffer = self.buffer.split(b"\n")
        for raw in lines:
            line = raw.rstrip(b"\r").decode("utf-8", errors="replace")
            if line == "":
                if self.payload_lines:
                    self.on_data("\n".join(self.payload_lines))
                self.payload_lines = []
            elif line.startswith("data:"):
                self.payload_lines.append(line[5:].lstrip(" "))

    def connectionLost(self, reason: Failure = Failure(ConnectionError("closed"))) -> None:  # noqa: B008
        if not self.finished.called:
            self.finished.callback(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.stopProducing()  # type: ignore[attr-defined]


class EventSource(Protocol):
    """Where the stream comes from (:class:`~pigeond.delivery.opencode_client.OpencodeClient`)."""

    @property
    def base_url(self) -> str: ...

    async def open_event_stream(self) -> IResponse: ...


class Outages(Protocol):
    """Whether opencode is unreachable, and its return
    (:class:`~pigeond.delivery.reachability.OpencodeReachability`)."""

    @property
    def down(self) -> bool: ...

    def when_back(self) -> Deferred[None]: ...


class EventStream:
    def __init__(
        self,
        client: EventSource,
        clock: IReactorTime,
        on_status: Callable[[str, str], None],
        on_connected: Callable[[bool], None],
        *,
        on_user_message: Callable[[str, dict[str, Any]], None] = lambda session, info: None,
        on_permission: Callable[[dict[str, Any]], None] = lambda event: None,
        stale_s: float = 60.0,
        backoff_s: tuple[float, ...] = RECONNECT_BACKOFF_S,
        outages: Outages | None = None,
    ) -> None:
        """``outages`` None: opencode's reachability is not followed (the backoff alone)."""
        self._client = client
        self._outages = outages
        self._connections = 0  # streams opened so far
        self._failed_opens = 0  # tries in a row that could not open one, opencode answering
        self._trouble_since: float | None = None  # the stream failing while opencode answers
        self._v2_said = False  # the 2.x's lack of a 1.x stream was logged
        self._clock = clock
        self._on_status = on_status
        self._on_connected = on_connected
        self._on_user_message = on_user_message
        self._on_permission = on_permission
        self._stale_s = stale_s
        self._backoff_s = backoff_s
        self._running = False
        self._protocol: ServerSentEvents | None = None
        self._watchdog: IDelayedCall | None = None
        self._sleep: Deferred[None] | None = None
        self._loop: Deferred[None] | None = None
        self.connected = False

    def start(self) -> None:
        self._running = True
        self._loop = Deferred.fromCoroutine(self._run())
        self._loop.addErrback(lambda f: log.failure("event stream loop died", f))

    @property
    def stopped(self) -> bool:
        return not self._running

    def stop(self) -> None:
        self._running = False
        if self._protocol is not None:
            self._protocol.close()
        if self._sleep is not None and not self._sleep.called:
            self._sleep.cancel()

    async def _run(self) -> None:
        failures = 0
        while self._running:
            opened_at = self._clock.seconds()
            connections = self._connections
            speaks_v2 = False
            try:
                await self._listen_once()
                reason = "closed by opencode"
            except SpeaksV2 as e:
                reason, speaks_v2 = str(e), True
            except Exception as e:
                reason = f"{type(e).__name__}: {e}"
            self._set_connected(False)
            if self.stopped:
                return
            if speaks_v2:
                self._sleep = self._no_stream_on_v2(reason)
            elif self._outages is not None and self._outages.down:
                # opencode is gone: its outage is logged and probed; reopen once it answers
                log.debug("event stream down ({reason}); waiting for opencode", reason=reason)
                failures = self._failed_opens = 0
                self._sleep = self._outages.when_back()
            else:
                lasted = self._clock.seconds() - opened_at
                failures = 0 if lasted > HEALTHY_S else failures + 1
                delay = self._backoff_s[min(failures, len(self._backoff_s)) - 1] if failures else 0
                self._failed_opens = (
                    self._failed_opens + 1 if self._connections == connections else 0
                )
                if self._failed_opens >= 2:  # once may be a stale connection: tried again
                    self._trouble(reason, delay)
                else:
                    log.debug("event stream down ({reason}); reconnecting in {delay} s",
                              reason=reason, delay=delay)  # fmt: skip
                self._sleep = deferLater(self._clock, delay, lambda: None)
            try:
                await self._sleep
            except CancelledError:
                return  # stopped

    def _no_stream_on_v2(self, reason: str) -> Deferred[None]:
        """A 2.x has no 1.x event stream: said once; tried again at the longest backoff."""
        delay = max(self._backoff_s)
        if not self._v2_said:
            self._v2_said = True
            log.info("no 1.x event stream ({reason}): its sessions' transcripts are read"
                     " instead", reason=reason)  # fmt: skip
        return deferLater(self._clock, delay, lambda: None)

    def _trouble(self, reason: str, delay: float) -> None:
        """The stream could not be opened although opencode answers: said once, when it
        begins (every retry is a debug line)."""
        if self._trouble_since is None:
            self._trouble_since = self._clock.seconds()
            log.warn("event stream down ({reason}); reconnecting every {cap:g} s at most,"
                     " polling turns meanwhile", reason=reason,
                     cap=max(self._backoff_s))  # fmt: skip
        else:
            log.debug("event stream still down ({reason}); reconnecting in {delay} s",
                      reason=reason, delay=delay)  # fmt: skip

    async def _listen_once(self) -> None:
        response = await self._client.open_event_stream()
        protocol = ServerSentEvents(self._handle, self._feed_watchdog)
        self._protocol = protocol
        response.deliverBody(protocol)
        self._set_connected(True)
        self._feed_watchdog()
        try:
            await protocol.finished
        finally:
            self._protocol = None
            if self._watchdog is not None and self._watchdog.active():
                self._watchdog.cancel()

    def _feed_watchdog(self) -> None:
        if self._watchdog is not None and self._watchdog.active():
            self._watchdog.reset(self._stale_s)
        else:
            self._watchdog = self._clock.callLater(self._stale_s, self._stale)

    def _stale(self) -> None:
        log.info("event stream silent for {s} s; reconnecting", s=self._stale_s)
        if self._protocol is not None:
            self._protocol.close()

    def _set_connected(self, connected: bool) -> None:
        if connected != self.connected:
            self.connected = connected
            self._on_connected(connected)
            if connected:
                self._connections += 1
                self._v2_said = False  # a 1.x again: a later 2.x is said again
                self._said_connected()

    def _said_connected(self) -> None:
        """The first connection is told, and the end of the stream's own trouble; a reconnect
        after a drop or an outage of opencode (told by reachability) is a debug line."""
        url = self._client.base_url
        if self._trouble_since is not None:
            lasted = how_long(self._clock.seconds() - self._trouble_since)
            self._trouble_since = None
            log.info("event stream connected again after {lasted}: {url}/global/event",
                     lasted=lasted, url=url)  # fmt: skip
        elif self._connections == 1:
            log.info("event stream connected: {url}/global/event", url=url)
        else:
            log.debug("event stream connected again: {url}/global/event", url=url)

    def _handle(self, data: str) -> None:
        if not any(kind in data for kind in _WANTED):
            return
        try:
            event = json.loads(data)
        except ValueError:
            return
        status = session_status_of(event)
        if status is not None:
            self._on_status(*status)
            return
        message = user_message_of(event)
        if message is not None:
            self._on_user_message(*message)
        elif is_permission_event(event):
            self._on_permission(event)
