"""Whether a session's turn is running, so pigeond never hands a prompt to a busy session.

opencode answers ``prompt_async`` with 204 at once and runs the turn for
seconds or minutes afterwards; a prompt that arrives meanwhile is merged into
the running turn (1.18) or starts a parallel one (1.15).  So after a hand-off
the arbiter waits here until that turn has ended.  Busy/idle comes from
opencode's event stream (:mod:`pigeond.delivery.events` calls :meth:`observe`); while
the stream is down, from polling ``GET /session/status`` with the session's
own directory, except while opencode is unreachable: a wait then polls nothing until it
answers again (:mod:`pigeond.delivery.reachability` probes it meanwhile).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pigeond.config import Config
from pigeond.delivery.opencode_client import OpencodeError

log = Logger()

TURN_ENDED = "turn ended"  # what wait_turn_end returns when the turn it waited for ended
# (connections of the event stream so far, a session's turn ends seen on the current one):
# when it changes, a turn of that session may have ended since it was last taken.
TurnCount = tuple[int, int]


class BusyPoller(Protocol):
    async def busy_sessions(self, directory: str) -> dict[str, str]: ...


@dataclass
class SessionTurns:
    busy: bool | None = None  # None: not known (never seen, or the event stream dropped)
    busy_seen: int = 0  # how many busy observations so far
    ended: int = 0  # how many times it went idle from busy (or from not known)


@dataclass(frozen=True, slots=True)
class TurnMark:
    """What had been seen of a session just before a hand-off."""

    busy_seen: int
    at: float


class TurnTracker:
    def __init__(
        self,
        clock: IReactorTime,
        poller: BusyPoller,
        config: Config,
        *,
        opencode_down: Callable[[], bool] = lambda: False,
    ) -> None:
        """``config`` gives ``busy_window_s``, ``turn_timeout_s``, ``status_poll_s``;
        ``opencode_down`` says whether an outage of opencode is under way."""
        self._clock = clock
        self._poller = poller
        self._opencode_down = opencode_down
        self.configure(config)
        self._sessions: dict[str, SessionTurns] = defaultdict(SessionTurns)
        self._waiters: dict[str, list[Deferred[None]]] = defaultdict(list)
        self.stream_connected = False
        self._connections = 0

    def configure(self, config: Config) -> None:
        """A reload's settings, for the waits that start from now on."""
        self._busy_window_s = config.busy_window_s
        self._turn_timeout_s = config.turn_timeout_s
        self._poll_interval_s = config.status_poll_s

    # -- what the event stream tells ----------------------------------------

    def observe(self, session: str, status: str) -> None:
        """A status for ``session``: ``busy`` or ``retry`` mean a turn runs; ``idle`` not."""
        state = self._sessions[session]
        if status in ("busy", "retry"):
            state.busy, state.busy_seen = True, state.busy_seen + 1
        elif status == "idle":
            if state.busy is not False:
                state.ended += 1
            state.busy = False
        else:
            return
        for waiter in self._waiters.pop(session, []):
            if not waiter.called:
                waiter.callback(None)

    def stream_state(self, connected: bool) -> None:
        """Events may have been missed while the stream was down: forget what we knew."""
        self.stream_connected = connected
        if connected:
            self._connections += 1  # events of the time it was down are lost: a new count
        for state in self._sessions.values():
            state.busy = None

    def is_busy(self, session: str) -> bool | None:
        return self._sessions[session].busy

    def known_idle(self, session: str) -> bool:
        """Whether :meth:`wait_until_idle` would return at once, without waiting or asking
        opencode: the event stream runs and last said the session is idle."""
        return self.stream_connected and self._sessions[session].busy is False

    def turns_ended(self, session: str) -> TurnCount | None:
        """A count that changes whenever a turn of ``session`` may have ended: the verifier
        looks for answers again only then.  None while the event stream is down (polling
        sees no turn end between two polls, so any moment may have ended one)."""
        if not self.stream_connected:
            return None
        return self._connections, self._sessions[session].ended

    def mark(self, session: str) -> TurnMark:
        return TurnMark(self._sessions[session].busy_seen, self._clock.seconds())

    # -- waiting ---------------------------------------------------------------

    async def _poll(self, session: str, directory: str) -> None:
        busy = await self._poller.busy_sessions(directory)
        self.observe(session, busy.get(session, "idle"))

    async def _next_change(self, session: str, max_wait_s: float) -> None:
        """Until ``session``'s status changes, or ``max_wait_s`` pass."""
        d: Deferred[None] = Deferred()
        self._waiters[session].append(d)

        def time_up() -> None:
            if not d.called:
                d.callback(None)

        timer = self._clock.callLater(max(max_wait_s, 0), time_up)
        try:
            await d
        finally:
            if timer.active():
                timer.cancel()

    async def _wait_step(self, session: str, directory: str, until: float) -> None:
        """One step of waiting: for an event, or (stream down) an interval and then a poll."""
        remaining = until - self._clock.seconds()
        if self.stream_connected and self._sessions[session].busy is not None:
            await self._next_change(session, remaining)
            return
        await self._next_change(session, min(self._poll_interval_s, remaining))
        if self._opencode_down():
            return  # no status to be had: the outage is probed, and logged, elsewhere
        try:
            await self._poll(session, directory)
        except OpencodeError as e:
            # an outage that began with this poll is logged by reachability
            said = log.debug if self._opencode_down() else log.info
            said("status poll for {target} failed: {error}", target=session, error=str(e))

    async def wait_until_idle(self, session: str, directory: str) -> str:
        """Before a hand-off: wait while a turn runs (one a person may have started)."""
        if not self.stream_connected or self._sessions[session].busy is None:
            await self._poll(session, directory)  # an outage here holds the message
        deadline = self._clock.seconds() + self._turn_timeout_s
        while self._sessions[session].busy:
            if self._clock.seconds() >= deadline:
                return f"still busy after {self._turn_timeout_s:g} s; going ahead"
            await self._wait_step(session, directory, deadline)
        return "idle"

    async def wait_turn_end(self, session: str, directory: str, mark: TurnMark) -> str:
        """After a hand-off: until the turn it started has ended; returns why waiting stopped."""
        no_turn_by = mark.at + self._busy_window_s
        give_up_at = mark.at + self._turn_timeout_s
        while True:
            state = self._sessions[session]
            now = self._clock.seconds()
            started = state.busy_seen > mark.busy_seen
            if started and state.busy is False:
                return TURN_ENDED
            if not started and now >= no_turn_by:
                return f"no busy status within {self._busy_window_s:g} s; taken as ended"
            if now >= give_up_at:
                return f"turn still running after {self._turn_timeout_s:g} s; going ahead"
            await self._wait_step(session, directory, give_up_at if started else no_turn_by)
