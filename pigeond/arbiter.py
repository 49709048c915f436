"""Hands queued messages to opencode with at most one hand-off in flight per target.

This is the property pigeond exists for: opencode runs parallel turns when
two prompts for one session arrive at once, so every prompt to a target goes
through ``_in_flight[target]``, a single Deferred that drains that target's
queue.  In ``turn`` delivery the drain also holds the slot until the turn its
prompt started has ended, so the next prompt never lands in a running turn.
Different targets drain in parallel.  The tick (a ``LoopingCall``) is the
safety net for retries and restarts and runs the expiry sweep and the
verifier; a new message for an idle target is dispatched at once by
:meth:`kick`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.internet.defer import CancelledError, Deferred, DeferredList, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from pigeond.envelope import render_envelope
from pigeond.model import NO_MODE, HandoffMode, StoredMessage
from pigeond.opencode_client import FailureKind, OpencodeError, SessionNotFound
from pigeond.preflight import directory_problem
from pigeond.prompt_mode import DEFAULT_MODE, PromptMode
from pigeond.registry import DirectoryResolver
from pigeond.storage import StorageError, SwarmRepository
from pigeond.turns import TurnMark, TurnTracker

BACKOFF_SCHEDULE_S: tuple[float, ...] = (1, 2, 5, 15, 60)
DEFAULT_MAX_ATTEMPTS = 10


class PromptSender(Protocol):
    async def prompt_async(
        self,
        session_id: str,
        directory: str,
        texts: Sequence[str],
        mode: Mapping[str, Any] | None = None,
    ) -> None: ...


class ModeSource(Protocol):
    async def mode_for(self, session: str, directory: str) -> PromptMode: ...


class AgentChecker(Protocol):
    async def has(self, agent: str, directory: str) -> bool: ...


class Tickable(Protocol):
    def tick(self) -> None: ...


def handoff_mode(mode: PromptMode, note: str | None) -> HandoffMode:
    return HandoffMode(mode.agent, mode.provider_id, mode.model_id, mode.variant, note)


def describe_mode(mode: HandoffMode) -> str:
    model = f"{mode.provider}/{mode.model}" if mode.provider and mode.model else "default model"
    return f"agent {mode.agent or 'default'}, {model}"


def backoff_after(failed_attempts: int, schedule: Sequence[float] = BACKOFF_SCHEDULE_S) -> float:
    """Seconds to wait after the ``failed_attempts``-th failure (1-based)."""
    return schedule[min(max(failed_attempts, 1), len(schedule)) - 1]


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    tick_s: float = 0.5
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_schedule: tuple[float, ...] = BACKOFF_SCHEDULE_S
    batch_max: int = 10
    outage_retry_s: float = 30.0
    verify_grace_s: float = 60.0


class Arbiter:
    log = Logger()

    def __init__(
        self,
        repo: SwarmRepository,
        registry: DirectoryResolver,
        opencode: PromptSender,
        clock: IReactorTime,
        *,
        policy: DeliveryPolicy = DeliveryPolicy(),
        turns: TurnTracker | None = None,
        verifier: Tickable | None = None,
        check_directory: Callable[[str], str | None] = directory_problem,
        modes: ModeSource | None = None,
        agents: AgentChecker | None = None,
    ) -> None:
        self._repo = repo
        self._registry = registry
        self._opencode = opencode
        self._clock = clock
        self._policy = policy
        self._turns = turns
        self._verifier = verifier
        self._check_directory = check_directory
        self._modes = modes
        self._agents = agents
        self._in_flight: dict[str, Deferred[None]] = {}
        self._turn_waits: set[Deferred[str]] = set()
        self._loop = LoopingCall(self.tick)
        self._loop.clock = clock
        self._stopping = False
        self.last_tick_at: float | None = None

    # -- lifecycle -----------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._loop.running

    def start(self) -> None:
        self._stopping = False
        self._loop.start(self._policy.tick_s, now=True)

    def stop(self) -> Deferred[None]:
        """Stop ticking and dispatching; fires when the prompts in flight have been answered.

        Waits for turns to end are cut short: the prompt is already handed off.
        """
        self._stopping = True
        if self._loop.running:
            self._loop.stop()
        for wait in list(self._turn_waits):
            wait.cancel()
        pending = list(self._in_flight.values())
        if not pending:
            return succeed(None)
        return DeferredList(pending, consumeErrors=True).addCallback(lambda _: None)

    def in_flight_targets(self) -> list[str]:
        return sorted(self._in_flight)

    @property
    def policy(self) -> DeliveryPolicy:
        return self._policy

    def set_policy(self, policy: DeliveryPolicy) -> None:
        """New settings (a config reload); a new tick interval restarts the loop."""
        old_tick = self._policy.tick_s
        self._policy = policy
        if policy.tick_s != old_tick and self._loop.running:
            self._loop.stop()
            self._loop = LoopingCall(self.tick)
            self._loop.clock = self._clock
            self._loop.start(policy.tick_s, now=False)

    def ticking(self, within_s: float) -> bool:
        """Whether the tick loop runs and has ticked within the last ``within_s`` seconds."""
        if not self._loop.running or self.last_tick_at is None:
            return False
        return self._clock.seconds() - self.last_tick_at <= within_s

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    # -- scheduling ------------------------------------------------------------

    def tick(self) -> None:
        """Expire, verify, and start a drain for every target with a due message.

        Never raises: an exception would stop the LoopingCall for good."""
        self.last_tick_at = self._clock.seconds()
        for step in (self._sweep, self._verify, self._dispatch_ready):
            try:
                step()
            except Exception:
                self.log.failure("arbiter tick step {step} failed; trying again next tick",
                                 step=step.__name__)  # fmt: skip

    def _sweep(self) -> None:
        for msg_id in self._repo.expire_due(self._now_ms()):
            self.log.warn("{msg_id} expired before it could be delivered", msg_id=msg_id)

    def _verify(self) -> None:
        if self._verifier is not None:
            self._verifier.tick()

    def _dispatch_ready(self) -> None:
        for target in self._repo.ready_targets(self._now_ms()):
            self.kick(target)

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

    # -- one target ---------------------------------------------------------------

    async def _drain(self, target: str) -> None:
        """Hand off ``target``'s due messages, a batch at a time, until none is due or one fails."""
        while not self._stopping:
            batch = self._repo.ready_batch(target, self._now_ms(), self._policy.batch_max)
            if not batch:
                return
            try:
                directory = await self._registry.resolve(target)
                problem = self._check_directory(directory)
                if problem is not None:
                    raise OpencodeError(problem, kind=FailureKind.OUTAGE)
                if self._turns is not None:
                    why = await self._turns.wait_until_idle(target, directory)
                    if why != "idle":
                        self.log.warn("{target}: {why}", target=target, why=why)
                    # messages may have come (more urgent ones too) while we waited
                    batch = self._repo.ready_batch(target, self._now_ms(), self._policy.batch_max)
                    if not batch or self._stopping:
                        return
                mode, note = await self._target_mode(target, directory)
                mark = self._turns.mark(target) if self._turns is not None else None
                texts = [render_envelope(m) for m in batch]
                mode, note = await self._prompt(target, directory, texts, mode, note)
            except Exception as e:
                await self._record_failure(target, batch, e)
                return
            if not self._record_hand_off(target, batch, handoff_mode(mode, note)):
                return
            if self._turns is not None and mark is not None:
                await self._wait_turn_end(target, directory, mark)

    async def _target_mode(self, target: str, directory: str) -> tuple[PromptMode, str | None]:
        """The agent and model of the target's latest user message, so a hand-off never
        switches its mode; an agent opencode no longer has is not named."""
        if self._modes is None:
            return DEFAULT_MODE, None
        mode = await self._modes.mode_for(target, directory)
        if mode.agent is None or self._agents is None:
            return mode, None
        if await self._agents.has(mode.agent, directory):
            return mode, None
        note = f"agent {mode.agent!r} no longer exists in opencode; named no agent (its default)"
        self.log.warn("{target}: {note}", target=target, note=note)
        return mode.without_agent(), note

    async def _prompt(
        self,
        target: str,
        directory: str,
        texts: Sequence[str],
        mode: PromptMode,
        note: str | None,
    ) -> tuple[PromptMode, str | None]:
        """One prompt naming ``mode``; an agent opencode refuses (400) is not the sender's
        fault: the prompt goes again at once naming none."""
        try:
            await self._opencode.prompt_async(target, directory, texts, mode.body_fields())
            return mode, note
        except OpencodeError as e:
            if e.status != 400 or mode.agent is None:
                raise
            note = f"opencode refused agent {mode.agent!r} ({e}); named no agent (its default)"
            self.log.warn("{target}: {note}", target=target, note=note)
        mode = mode.without_agent()
        await self._opencode.prompt_async(target, directory, texts, mode.body_fields())
        return mode, note

    def _record_hand_off(
        self, target: str, batch: list[StoredMessage], mode: HandoffMode = NO_MODE
    ) -> bool:
        now_ms = self._now_ms()
        verify_by = now_ms + int(self._policy.verify_grace_s * 1000)
        ids = [m.msg_id for m in batch]
        try:
            self._repo.mark_handed_off_many(ids, now_ms, verify_by, mode)
        except StorageError as e:
            # opencode has the prompt but the database did not record it: the
            # messages stay queued and will be sent again (at-least-once).
            self.log.error("handed off {msg_ids} to {target} but could not record it: {error}",
                           msg_ids=ids, target=target, error=str(e))  # fmt: skip
            return False
        for msg_id in ids:
            self.log.info("handed off {msg_id} to {target} (batch of {n}; {mode})",
                          msg_id=msg_id, target=target, n=len(ids),
                          mode=describe_mode(mode))  # fmt: skip
        return True

    async def _wait_turn_end(self, target: str, directory: str, mark: TurnMark) -> None:
        assert self._turns is not None
        wait = Deferred.fromCoroutine(self._turns.wait_turn_end(target, directory, mark))
        self._turn_waits.add(wait)
        try:
            why = await wait
        except CancelledError:
            return
        finally:
            self._turn_waits.discard(wait)
        self.log.info("{target}: {why}", target=target, why=why)

    async def _record_failure(
        self, target: str, batch: list[StoredMessage], error: Exception
    ) -> None:
        kind = error.kind if isinstance(error, OpencodeError) else FailureKind.ATTEMPT
        text = str(error) or repr(error)
        if isinstance(error, SessionNotFound):
            kind = await self._confirm_gone(target)
            text = f"session not found: {text}"
        now_ms = self._now_ms()
        ids = [m.msg_id for m in batch]
        if kind is FailureKind.OUTAGE:
            hold_until = now_ms + int(self._policy.outage_retry_s * 1000)
            self._repo.record_outage(ids, text, now_ms, hold_until)
            self.log.info("{target} unreachable ({error}); holding {n} message(s), retry in {s} s",
                          target=target, error=text, n=len(ids),
                          s=self._policy.outage_retry_s)  # fmt: skip
            return
        if kind is FailureKind.PERMANENT:
            self._repo.fail_now(ids, text, now_ms)
            self.log.warn("{msg_ids} to {target} failed for good: {error}",
                          msg_ids=ids, target=target, error=text)  # fmt: skip
            return
        for message in batch:
            attempts = message.attempts + 1
            retry_at: int | None = None
            if attempts < self._policy.max_attempts:
                delay = backoff_after(attempts, self._policy.backoff_schedule)
                retry_at = now_ms + int(delay * 1000)
            self._repo.record_failed_attempt(message.msg_id, text, now_ms, retry_at)
            self.log.info("{msg_id} to {target}: attempt {attempts} failed ({error}); {next}",
                          msg_id=message.msg_id, target=target, attempts=attempts, error=text,
                          next="failed for good" if retry_at is None
                          else f"retry in {retry_at - now_ms} ms")  # fmt: skip

    async def _confirm_gone(self, target: str) -> FailureKind:
        """A 404 is permanent only if a fresh lookup agrees the session is gone."""
        self._registry.invalidate(target)
        try:
            await self._registry.resolve(target)
        except SessionNotFound:
            return FailureKind.PERMANENT
        except OpencodeError as e:
            return e.kind
        except Exception:
            return FailureKind.ATTEMPT
        return FailureKind.ATTEMPT
