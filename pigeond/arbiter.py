"""Hands queued messages to opencode with at most one hand-off in flight per target.

This is the property pigeond exists for: opencode runs parallel turns when
two prompts for one session arrive at once, so every prompt to a target goes
through ``_in_flight[target]``, a single Deferred that drains that target's
queue one message at a time.  Different targets drain in parallel.  The tick
(a ``LoopingCall``) is the safety net for retries and restarts; a new message
for an idle target is dispatched at once through :meth:`kick`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from pigeond.envelope import render_envelope
from pigeond.opencode_client import SessionNotFound
from pigeond.storage import StorageError, SwarmRepository

BACKOFF_SCHEDULE_S: tuple[float, ...] = (1, 2, 5, 15, 60)
DEFAULT_MAX_ATTEMPTS = 10


class PromptSender(Protocol):
    async def prompt_async(self, session_id: str, directory: str, text: str) -> None: ...


class DirectoryResolver(Protocol):
    async def resolve(self, session_id: str) -> str: ...

    def invalidate(self, session_id: str) -> None: ...


def backoff_after(failed_attempts: int, schedule: Sequence[float] = BACKOFF_SCHEDULE_S) -> float:
    """Seconds to wait after the ``failed_attempts``-th failure (1-based)."""
    return schedule[min(max(failed_attempts, 1), len(schedule)) - 1]


class Arbiter:
    log = Logger()

    def __init__(
        self,
        repo: SwarmRepository,
        registry: DirectoryResolver,
        opencode: PromptSender,
        clock: IReactorTime,
        *,
        tick_s: float = 0.5,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff_schedule: Sequence[float] = BACKOFF_SCHEDULE_S,
    ) -> None:
        self._repo = repo
        self._registry = registry
        self._opencode = opencode
        self._clock = clock
        self._tick_s = tick_s
        self._max_attempts = max_attempts
        self._backoff = tuple(backoff_schedule)
        self._in_flight: dict[str, Deferred[None]] = {}
        self._loop = LoopingCall(self.tick)
        self._loop.clock = clock
        self._stopping = False

    # -- lifecycle -----------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._loop.running

    def start(self) -> None:
        self._stopping = False
        self._loop.start(self._tick_s, now=True)

    def stop(self) -> Deferred[None]:
        """Stop ticking and dispatching; fires when the hand-offs in flight have ended."""
        self._stopping = True
        if self._loop.running:
            self._loop.stop()
        pending = list(self._in_flight.values())
        if not pending:
            return succeed(None)
        done: Deferred[None] = DeferredList(pending, consumeErrors=True).addCallback(lambda _: None)
        return done

    def in_flight_targets(self) -> list[str]:
        return sorted(self._in_flight)

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    # -- scheduling ------------------------------------------------------------

    def tick(self) -> None:
        """One pass over every target with a due message.  Never raises: an
        exception would stop the LoopingCall for good."""
        try:
            for target in self._repo.ready_targets(self._now_ms()):
                self.kick(target)
        except Exception:
            self.log.failure("arbiter tick failed; will try again next tick")

    def kick(self, target: str) -> None:
        """Start draining ``target`` unless a hand-off to it is already in flight."""
        if self._stopping or target in self._in_flight:
            return
        drain = Deferred.fromCoroutine(self._drain(target))
        if drain.called:
            # finished synchronously: nothing is in flight, and the errback
            # below must still see a failure
            drain.addErrback(self._log_drain_failure, target)
            return
        self._in_flight[target] = drain
        drain.addErrback(self._log_drain_failure, target)
        drain.addBoth(self._release, target)

    def _release(self, result: object, target: str) -> object:
        self._in_flight.pop(target, None)
        return result

    def _log_drain_failure(self, failure: Failure, target: str) -> None:
        self.log.failure("delivery to {target} stopped on an error", failure, target=target)

    async def _drain(self, target: str) -> None:
        """Hand off ``target``'s due messages one at a time until none is due or one fails."""
        while not self._stopping:
            head = self._repo.queue_head(target)
            now_ms = self._now_ms()
            if head is None or head.next_retry_at is None or head.next_retry_at > now_ms:
                return
            try:
                directory = await self._registry.resolve(target)
                await self._opencode.prompt_async(target, directory, render_envelope(head))
            except Exception as e:
                if isinstance(e, SessionNotFound):
                    self._registry.invalidate(target)
                self._record_failure(head.msg_id, head.attempts, target, str(e) or repr(e))
                return
            try:
                self._repo.mark_handed_off(head.msg_id, self._now_ms())
            except StorageError as e:
                # opencode has the prompt but the database did not record it:
                # the message stays queued and will be sent again.
                self.log.error(
                    "handed off {msg_id} to {target} but could not record it: {error}",
                    msg_id=head.msg_id,
                    target=target,
                    error=str(e),
                )
                return
            self.log.info("handed off {msg_id} to {target}", msg_id=head.msg_id, target=target)

    def _record_failure(self, msg_id: str, attempts_before: int, target: str, error: str) -> None:
        attempts = attempts_before + 1
        now_ms = self._now_ms()
        retry_at: int | None = None
        if attempts < self._max_attempts:
            retry_at = now_ms + int(backoff_after(attempts, self._backoff) * 1000)
        self._repo.record_failed_attempt(msg_id, error, now_ms, retry_at)
        if retry_at is None:
            self.log.warn(
                "{msg_id} to {target} failed for good after {attempts} attempts: {error}",
                msg_id=msg_id,
                target=target,
                attempts=attempts,
                error=error,
            )
        else:
            self.log.info(
                "{msg_id} to {target}: attempt {attempts} failed, retry in {delay_ms} ms: {error}",
                msg_id=msg_id,
                target=target,
                attempts=attempts,
                delay_ms=retry_at - now_ms,
                error=error,
            )
