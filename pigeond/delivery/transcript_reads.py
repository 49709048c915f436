"""Transcript reads that pass their deadline, told to ``/health``.

A transcript read (opencode's ``GET /session/<id>/message``, a Claude Code session's
JSONL file) that hangs is held as an outage: the hand-off or the verification waiting on
it spends no attempt, and is tried again later.  That keeps messages safe, but alone it
is silent: opencode answers its other calls (``/health`` said ``opencode: ok``) while
every read of one session hangs, and messages wait indefinitely.  So every read has a
deadline (``handoff_timeout_s``: the client's for opencode, :func:`within_deadline` for a
file read in a thread), and each one that passes it is told to one
:class:`TranscriptReadWatch`.  While some target's latest read timed out, ``/health``
says so: ``opencode: degraded`` with ``opencode_problem`` (``transcript reads time out
(3 in the last minute) ...``) for opencode's sessions, ``transcripts_problem`` for every
runtime's.  A read of that target that succeeds clears it; a target nothing has tried
to read for :data:`FORGET_S` is forgotten (nothing waits on it any more).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pigeond.config import DEFAULTS
from pigeond.model import Runtime, runtime_of

log = Logger()
T = TypeVar("T")

WINDOW_S: Final = 60.0  # the timeouts a problem counts: those of the last minute
# A target whose last read timed out and that nothing has tried to read since: a read is
# tried every verify_interval_s or outage_retry_s while messages wait on it, so after
# ten minutes without one nothing does.
FORGET_S: Final = 600.0


class ReadTimedOut(Exception):
    """A read in a thread did not return within its deadline (the thread runs on)."""


@dataclass(slots=True)
class _Stuck:
    since: float  # its first timeout since its last good read
    last: float  # its latest timeout
    error: str  # what that timeout said


def _runtime(target: str) -> Runtime:
    try:
        return runtime_of(target)
    except ValueError:
        return Runtime.OPENCODE


class TranscriptReadWatch:
    """Which targets' transcript reads pass their deadline, for ``/health``."""

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        # each read's deadline (the client keeps it at handoff_timeout_s through reloads)
        self.deadline_s: float = DEFAULTS.handoff_timeout_s
        self._timeouts: deque[tuple[float, Runtime]] = deque()  # the last WINDOW_S's
        self._stuck: dict[str, _Stuck] = {}  # targets whose latest read timed out
        self.timed_out_total = 0

    def timed_out(self, target: str, error: str) -> None:
        """A read of ``target``'s transcript passed its deadline (``error`` says which)."""
        now = self._clock.seconds()
        self.timed_out_total += 1
        self._timeouts.append((now, _runtime(target)))
        stuck = self._stuck.get(target)
        if stuck is None:
            self._stuck[target] = _Stuck(now, now, error)
            log.warn("reading {target}'s transcript timed out ({error}); its messages wait,"
                     " spending no attempt, and /health says so until a read succeeds",
                     target=target, error=error)  # fmt: skip
        else:
            stuck.last, stuck.error = now, error

    def succeeded(self, target: str) -> None:
        """A read of ``target``'s transcript was answered in time."""
        if self._stuck.pop(target, None) is not None:
            log.info("{target}'s transcript is read again", target=target)

    def problem(self, runtime: Runtime | None = None) -> str | None:
        """What ``/health`` says while reads (of ``runtime``'s targets; every runtime's when
        None) time out; None while none does."""
        now = self._clock.seconds()
        self._forget(now)
        stuck = {t: s for t, s in self._stuck.items() if runtime in (None, _runtime(t))}
        if not stuck:
            return None
        recent = sum(1 for _, r in self._timeouts if runtime in (None, r))
        target, latest = max(stuck.items(), key=lambda item: item[1].last)
        others = f" and {len(stuck) - 1} more" if len(stuck) > 1 else ""
        return (
            f"transcript reads time out ({recent} in the last minute): {target}{others},"
            f" latest: {latest.error}; their messages wait, spending no attempt"
        )

    def _forget(self, now: float) -> None:
        while self._timeouts and self._timeouts[0][0] <= now - WINDOW_S:
            self._timeouts.popleft()
        for target in [t for t, s in self._stuck.items() if s.last <= now - FORGET_S]:
            del self._stuck[target]


async def within_deadline(clock: IReactorTime, work: Deferred[T], timeout_s: float) -> T:
    """``work``'s result, or :class:`ReadTimedOut` once ``timeout_s`` has passed; ``work``
    itself is not cancelled (a read in a thread cannot be): its late result is dropped."""
    waiter: Deferred[T] = Deferred()

    def settle(result: T | Failure) -> None:
        if waiter.called:
            return
        if isinstance(result, Failure):
            waiter.errback(result)
        else:
            waiter.callback(result)

    def give_up() -> None:
        if not waiter.called:
            waiter.errback(ReadTimedOut(f"no answer within {timeout_s:g} s"))

    timer = clock.callLater(timeout_s, give_up)
    work.addBoth(settle)
    try:
        return await waiter
    finally:
        if timer.active():
            timer.cancel()
