"""Whether opencode answers, and how delivery waits for it while it does not.

Every call to opencode tells one :class:`OpencodeReachability` what it found: an answer
(:meth:`~OpencodeReachability.answered`), or no connection at all or a status that says
opencode is not there (:meth:`~OpencodeReachability.failed`: refused, reset, 502, 503,
504, 401, 403).  The first failure starts an *outage*: it is logged once (warn, with its
cause), ``/health`` says ``unreachable`` with since when and the last error, and from then
on a single probe at a time (``GET /session/status``) asks opencode again:
:data:`PROBE_BACKOFF_S` after the failure, then every 2 s at most (each wait shortened at
random by up to :data:`JITTER`, so daemons started together do not ask in step).  While
nothing needs opencode (:meth:`~OpencodeReachability.needed_while`: nothing queued, nothing
to verify) the waits go on growing, to :data:`IDLE_PROBE_BACKOFF_S`'s 30 s, so an idle
daemon beside no opencode wakes for a probe twice a minute, not every 2 s; the moment
something needs it, :meth:`~OpencodeReachability.hurry` cuts a longer wait to the 2 s
pace.
Meanwhile little else calls it: the arbiter tries each target once per
``outage_retry_s`` (its queue's head says why it waits), the verifier reads no
transcript, a turn wait polls no status, the event stream waits.  So a ten-minute outage
costs about 300 probes, and 20 tries per waiting target at the default 30 s.

The first answer, of the probe or of any other call, ends the outage: logged once (info,
with how long it lasted), and whatever waited goes on at once (:meth:`on_back` and
:meth:`when_back`, called on the next turn of the reactor, never inside the call that
answered).  So delivery resumes within about 2 s of opencode's return.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Final

from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

log = Logger()

# The waits before each probe of an outage; the last repeats.  Against a loopback opencode
# a refused connection costs microseconds, so the cap bounds the delay after its return.
PROBE_BACKOFF_S: Final = (0.25, 0.5, 1.0, 2.0)
JITTER: Final = 0.25  # each wait is shortened at random by up to this fraction
# ... and while nothing needs opencode: the same, then longer, to a bounded 30 s
IDLE_PROBE_BACKOFF_S: Final = (*PROBE_BACKOFF_S, 5.0, 10.0, 30.0)


class Reach(Enum):
    """What the calls to opencode have shown so far (``/health``'s ``opencode``)."""

    NOT_CONTACTED = "not contacted yet"
    OK = "ok"
    UNREACHABLE = "unreachable"


def how_long(seconds: float) -> str:
    """A duration as an operator reads it: ``4.2 s``, ``3 min 12 s``, ``2 h 5 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


class OpencodeReachability:
    """The one view of whether opencode answers; owned by the client, which tells it."""

    def __init__(
        self,
        url: str,
        clock: IReactorTime,
        probe: Callable[[], Awaitable[None]],
        *,
        backoff_s: tuple[float, ...] = PROBE_BACKOFF_S,
        idle_backoff_s: tuple[float, ...] = IDLE_PROBE_BACKOFF_S,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        """``probe`` makes one call to opencode (its outcome comes back through
        :meth:`answered` or :meth:`failed`, as any call's); ``jitter`` gives a number in
        [0, 1) per wait.  ``idle_backoff_s``: the waits while nothing needs opencode."""
        self._url = url
        self._clock = clock
        self._probe = probe
        self._backoff_s = backoff_s
        self._idle_backoff_s = idle_backoff_s
        self._needed: Callable[[], bool] = lambda: True
        self._jitter = jitter
        self.state = Reach.NOT_CONTACTED
        self.since: float | None = None  # when the outage began (clock seconds)
        self.last_error: str | None = None  # the latest failure of this outage
        self.probes = 0  # probes made, over every outage
        self._on_back: list[Callable[[], None]] = []
        self._waiters: list[Deferred[None]] = []
        self._probing: Deferred[None] | None = None
        self._sleep: Deferred[None] | None = None
        self._wake: IDelayedCall | None = None  # the end of the probe's wait under way
        self._notify: IDelayedCall | None = None
        self._stopped = False

    @property
    def down(self) -> bool:
        """Whether an outage is under way: calls to opencode are pointless until it ends."""
        return self.state is Reach.UNREACHABLE

    def answered(self) -> None:
        """A call got opencode's answer: an outage under way ends."""
        if self.state is Reach.UNREACHABLE:
            lasted = how_long(self._clock.seconds() - (self.since or self._clock.seconds()))
            log.info("opencode at {url} answers again after {lasted}; delivery resumes",
                     url=self._url, lasted=lasted)  # fmt: skip
            self._stop_probing()
            self._notify = self._clock.callLater(0, self._tell_back)
        self.state, self.since, self.last_error = Reach.OK, None, None

    def failed(self, error: str) -> None:
        """A call found opencode unreachable (``error`` says how): an outage begins, unless
        one is under way already."""
        self.last_error = error
        if self.state is Reach.UNREACHABLE:
            return
        self.state, self.since = Reach.UNREACHABLE, self._clock.seconds()
        log.warn("opencode at {url} unreachable ({error}); delivery waits for it, asking again"
                 " every {cap:g} s at most ({idle:g} s while nothing waits)", url=self._url,
                 error=error, cap=max(self._backoff_s),
                 idle=max(self._idle_backoff_s))  # fmt: skip
        if not self._stopped and self._probing is None:
            self._probing = Deferred.fromCoroutine(self._probe_until_back())
            self._probing.addErrback(lambda f: log.failure("probing opencode stopped", f))
            self._probing.addBoth(self._probing_ended)

    def needed_while(self, needed: Callable[[], bool]) -> None:
        """Probe at the 2 s pace only while ``needed()`` (something waits for opencode);
        otherwise the waits grow to :data:`IDLE_PROBE_BACKOFF_S`'s last.  Unset, it is
        always needed."""
        self._needed = needed

    def hurry(self) -> None:
        """Something needs opencode now: a probe's wait longer than the 2 s pace ends
        within it (a shorter one is left as it is)."""
        wake = self._wake
        if wake is None or not wake.active():
            return
        if wake.getTime() - self._clock.seconds() > self._backoff_s[-1]:
            wake.reset(self._backoff_s[-1] * (1 - JITTER * self._jitter()))

    def on_back(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` at the end of every outage."""
        self._on_back.append(callback)

    def when_back(self) -> Deferred[None]:
        """Fires at the end of the outage under way (at once when there is none);
        cancellable."""
        if not self.down:
            return succeed(None)
        waiter: Deferred[None] = Deferred(lambda d: self._waiters.remove(d))
        self._waiters.append(waiter)
        return waiter

    def stop(self) -> None:
        """At shutdown: no more probes, and nobody is told of a return any more."""
        self._stopped = True
        self._stop_probing()
        if self._notify is not None and self._notify.active():
            self._notify.cancel()
        for waiter in list(self._waiters):
            waiter.cancel()

    def _tell_back(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(None)
        for callback in self._on_back:
            callback()

    def _stop_probing(self) -> None:
        if self._sleep is not None and not self._sleep.called:
            self._sleep.cancel()

    def _probing_ended(self, _: object) -> None:
        self._probing = None

    def _wait(self, seconds: float) -> Deferred[None]:
        """A wait :meth:`hurry` may shorten; cancelling it cancels its timer."""
        done: Deferred[None] = Deferred(lambda d: self._wake.cancel() if self._wake else None)
        self._wake = self._clock.callLater(seconds, done.callback, None)
        return done

    async def _probe_until_back(self) -> None:
        """One probe at a time, after the backoff's wait, until an answer ends the outage."""
        step = 0
        while self.down and not self._stopped:
            waits = self._backoff_s if self._needed() else self._idle_backoff_s
            wait_s = waits[min(step, len(waits) - 1)]
            step = min(step + 1, len(self._idle_backoff_s))  # needed: at most the 2 s pace
            self._sleep = self._wait(wait_s * (1 - JITTER * self._jitter()))
            try:
                await self._sleep
            except CancelledError:
                return  # the outage ended (another call got an answer), or pigeond stops
            finally:
                self._sleep = self._wake = None
            self.probes += 1
            try:
                await self._probe()
            except Exception:  # a bug of ours must not end the probing: delivery waits on it
                log.failure("probing opencode at {url} failed", url=self._url)
