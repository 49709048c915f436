"""Hands queued messages to opencode with at most one hand-off in flight per target.

This is the property pigeond exists for: opencode runs parallel turns when
two prompts for one session arrive at once, so every prompt to a target goes
through ``_in_flight[target]``, a single Deferred that drains that target's
queue.  In ``turn`` delivery the drain also holds the slot until the turn its
prompt started has ended, so the next prompt never lands in a running turn.
What one drain does is :mod:`pigeond.delivery.drain`; what it writes once a hand-off
has ended, :mod:`pigeond.delivery.outcomes`; how each runtime takes a batch,
:mod:`pigeond.delivery.runtime`.  Different targets drain in parallel.
The tick (:attr:`Arbiter.ticking_service`, a ``TimerService`` of its own, started
and stopped with the arbiter) is the safety net for retries and restarts (the expiry
sweep and the verifier are jobs of their own); a new message for an idle target is
dispatched at once by :meth:`kick`.

Faults of the database are not faults of delivery.  A prompt opencode took
(2xx) whose hand-off cannot be written (disk full) is kept in memory as an
:class:`UnrecordedHandOff` and written on a later tick; until then its target
gets nothing, so the same messages are never prompted again while the
record is missing (each prompt is an LLM turn).  A database file deleted or
replaced under pigeond stops delivery at once, and after :meth:`Arbiter.close`
(shutdown) a hand-off that ends late writes nothing: the database is closed.

The database is a :class:`~pigeond.storage.database.Database`: every call is
answered later, off the reactor thread.  A tick whose database work has not
finished (a write waiting for a lock another process holds) makes the next
tick do nothing, so ticks never pile up behind a lock.  Under load, the reads of
many targets' next batches share one trip to a reader thread, and their hand-off
records one transaction (:mod:`pigeond.delivery.grouping`); alone, each goes at
once.  After a hand-off the queue is read again only if something may be due: a
bound cut the batch, or the target was kicked meanwhile.
The intent to hand off is committed before each call, so a crash never sends a prompt
twice (:mod:`pigeond.delivery.recovery`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from twisted.application.internet import TimerService
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pigeond.config import Config
from pigeond.delivery.drain import TargetDrain, TargetLocks
from pigeond.delivery.grouping import (
    Grouped,
    ReadyAsk,
    StepAnswer,
    StepAsk,
    drain_steps,
    ready_batches,
)
from pigeond.delivery.metrics import DeliveryMetrics
from pigeond.delivery.opencode_dialect import Dialect, SwitchingRuntime
from pigeond.delivery.opencode_runtime import OpencodeRuntime, OpencodeTranscripts
from pigeond.delivery.opencode_transcript import TranscriptReader
from pigeond.delivery.outcomes import DrainState, HandOffOutcomes
from pigeond.delivery.policy import (
    BACKOFF_SCHEDULE_S,
    DeliveryPolicy,
    UnrecordedHandOff,
    backoff_after,
)
from pigeond.delivery.preflight import directory_problem
from pigeond.delivery.prompting import (
    AgentChecker,
    ModeAwarePrompter,
    ModeSource,
    PromptSender,
)
from pigeond.delivery.recovery import HandOffRecovery
from pigeond.delivery.registry import DirectoryResolver
from pigeond.delivery.routing import Routing
from pigeond.delivery.runtime import AgentRuntime, Runtimes
from pigeond.delivery.steering import steering_allowed
from pigeond.delivery.turns import TurnTracker
from pigeond.model import StoredMessage
from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.database import Database

DEFAULT_POLICY = DeliveryPolicy()

log = Logger()


__all__ = [
    "BACKOFF_SCHEDULE_S", "AgentChecker", "Arbiter", "DeliveryPolicy", "ModeSource",
    "PromptSender", "backoff_after",
]  # fmt: skip


class Arbiter:
    def __init__(
        self,
        db: Database,
        registry: DirectoryResolver,
        opencode: PromptSender,
        clock: IReactorTime,
        *,
        policy: DeliveryPolicy = DEFAULT_POLICY,
        turns: TurnTracker | None = None,
        check_directory: Callable[[str], str | None] = directory_problem,
        modes: ModeSource | None = None,
        agents: AgentChecker | None = None,
        database_problem: Callable[[], str | None] = lambda: None,
        metrics: DeliveryMetrics | None = None,
        transcripts: TranscriptReader | None = None,
        target_locks: TargetLocks | None = None,
        routing: Routing | None = None,
        opencode_down: Callable[[], bool] = lambda: False,
        runtimes: Sequence[AgentRuntime] = (),
        opencode_v2: tuple[AgentRuntime, Dialect] | None = None,
        on_transcript: Callable[[str, list[dict[str, Any]]], None] = lambda target, infos: None,
        nothing_due: Callable[[], bool] = lambda: False,
        shared_tick: Callable[[float], None] | None = None,
    ) -> None:
        """The opencode runtime is built from ``registry``, ``opencode``, ``turns``,
        ``check_directory``, ``modes``, ``agents`` and ``transcripts`` (whose reads tell
        ``on_transcript`` the agent and model of each turn); ``runtimes`` are the
        others (Claude Code, MCP-only members: :mod:`pigeond.delivery.claude_runtime`).
        ``opencode_v2``: the 2.x runtime and the verdict on the server, for an opencode
        that may be a 2.x (:mod:`pigeond.delivery.opencode_dialect`).
        ``database_problem`` says why the database file is no longer the one opened
        (None while it is); see :class:`pigeond.service.db_watch.DatabaseWatch`.
        ``transcripts`` is where a message in doubt is looked for (see recovery).
        ``target_locks`` make a drain exclusive across daemons on one PostgreSQL, and
        ``routing`` leaves the targets another daemon's opencode has to that daemon.
        ``opencode_down`` says whether an outage of opencode is under way: a target tried
        in it (its queue's head then says why it waits) is tried again after
        ``outage_retry_s``, or at once when :meth:`opencode_back` ends the outage (see
        :mod:`pigeond.delivery.reachability`).  While ``nothing_due`` says no queued
        message can be due (nothing written since a look found none: see
        pigeond/service/quiet.py), a tick reads no queue.  With ``shared_tick`` the
        arbiter has no timer of its own: the daemon's one tick calls :meth:`scheduled_tick`
        (one wake-up for every periodic job), and a new interval goes to ``shared_tick``."""
        self._db = db
        self._nothing_due = nothing_due
        self._opencode_down = opencode_down
        self._routing = routing
        self._clock = clock
        self._policy = policy
        self.metrics = metrics if metrics is not None else DeliveryMetrics()
        self._state = DrainState()
        opencode_transcripts = (
            OpencodeTranscripts(registry, transcripts, on_transcript=on_transcript)
            if transcripts is not None
            else None
        )
        opencode_v1 = OpencodeRuntime(
            registry, ModeAwarePrompter(opencode, modes, agents), clock, self.metrics,
            turns=turns, check_directory=check_directory, transcripts=opencode_transcripts,
        )  # fmt: skip
        self.opencode: AgentRuntime = (
            opencode_v1 if opencode_v2 is None else SwitchingRuntime(opencode_v1, *opencode_v2)
        )
        self.runtimes = Runtimes([self.opencode, *runtimes])
        # every target's drain step (its hand-off record, next read and intent) made together
        # under load; the reads that end a doubt or look for a steer go to the readers
        ready_reads: Grouped[ReadyAsk, list[StoredMessage]] = Grouped(
            lambda asks: db.read(ready_batches, asks)
        )
        steps: Grouped[StepAsk, StepAnswer] = Grouped(lambda asks: db.write(drain_steps, asks))
        self._outcomes = HandOffOutcomes(
            db, steps, self._state, lambda: self._policy, registry, self.metrics,
            clock, opencode_down,
        )  # fmt: skip
        recovery = HandOffRecovery(
            db, self.runtimes.transcripts_of, clock, opencode_down=opencode_down,
            wait_for_opencode=self._outcomes.wait_for_opencode,
        )  # fmt: skip
        self._drains = TargetDrain(
            self._state, self._outcomes, self.runtimes, ready_reads, steps, recovery,
            lambda: self._policy, database_vanished=self._database_vanished,
            target_locks=target_locks, routing=routing,
            steer_allowed=lambda target: db.read(steering_allowed, target),
        )  # fmt: skip
        self._in_flight: dict[str, Deferred[None]] = {}
        self.ticking_service = self._tick_service(policy.tick_s)
        self._shared_tick = shared_tick
        self._started = False
        self._database_problem = database_problem
        self._database_gone: str | None = None
        self._step_errors: dict[str, str] = {}
        self._tick_running = False
        self.last_tick_at: float | None = None

    # -- lifecycle -----------------------------------------------------------

    @property
    def running(self) -> bool:
        if self._shared_tick is not None:
            return self._started
        return bool(self.ticking_service.running)

    def start(self) -> None:
        self._state.stopping = False
        if self._shared_tick is not None and not self._started:
            self._started = True
            self.tick()  # at once, as a timer of its own would (restarts, recovery)
        self._started = True
        if self._shared_tick is None and not self.ticking_service.running:
            self.ticking_service.startService()

    def scheduled_tick(self) -> None:
        """The shared tick's call: a :meth:`tick` from :meth:`start` to :meth:`stop`."""
        if self._started:
            self.tick()

    def stop(self) -> Deferred[None]:
        """Stop ticking and dispatching; fires when the prompts in flight have been answered.

        Waits for turns to end are cut short: the prompt is already handed off.
        """
        self._state.stopping = True
        self._started = False
        if self.ticking_service.running:
            self.ticking_service.stopService()
        for runtime in self.runtimes.all():
            runtime.stop()
        pending = list(self._in_flight.values())
        if not pending:
            return succeed(None)
        return DeferredList(pending, consumeErrors=True).addCallback(lambda _: None)

    async def close(self) -> None:
        """The database is about to be closed (shutdown): record what is still only in
        memory if the database lets us, and never touch it again, whatever ends late."""
        self._state.stopping = True
        if self._state.closed:
            return
        if self._database_gone is None:
            for target in list(self._state.unrecorded):
                await self._outcomes.retry_record(target)
        for lost in self._state.unrecorded.values():
            log.warn(
                "{msg_ids} were handed off to {target} but never recorded ({error});"
                " they stay queued and in doubt: looked for in the transcript after the restart",
                msg_ids=list(lost.msg_ids), target=lost.target, error=lost.error,
            )  # fmt: skip
        self._state.closed = True

    def in_flight_targets(self) -> list[str]:
        return sorted(self._in_flight)

    def unrecorded(self) -> list[UnrecordedHandOff]:
        """Hand-offs opencode took that the database has not recorded yet, by target."""
        unrecorded = self._state.unrecorded
        return [unrecorded[t] for t in sorted(unrecorded)]

    def configure(self, config: Config) -> None:
        """A reload's settings (see :meth:`set_policy`)."""
        self.set_policy(DeliveryPolicy.from_config(config))

    def set_policy(self, policy: DeliveryPolicy) -> None:
        """New settings (a config reload); a new tick interval restarts the loop."""
        old_tick = self._policy.tick_s
        self._policy = policy
        if policy.tick_s != old_tick and self._shared_tick is not None:
            self._shared_tick(policy.tick_s)
        elif policy.tick_s != old_tick:
            service = self.ticking_service
            was_running = service.running
            if was_running:
                service.stopService()
            service.step = policy.tick_s
            if was_running:
                service.startService()

    def ticking(self, within_s: float) -> bool:
        """Whether the tick loop runs and has ticked within the last ``within_s`` seconds."""
        if not self.running or self.last_tick_at is None:
            return False
        return self._clock.seconds() - self.last_tick_at <= within_s

    def _tick_service(self, every_s: float) -> TimerService:
        service = TimerService(every_s, self.tick)
        service.clock = self._clock
        service.setName("arbiter tick")
        return service

    def ticking_lately(self) -> bool:
        """Whether it ticked within two tick intervals and a second (a monitor's view)."""
        return self.ticking(2 * self._policy.tick_s + 1)

    def tick(self) -> None:
        """Record late hand-offs and start a drain for every target with a
        due message; nothing at all once the database file is gone, or while the last
        tick's database work is still waited for.

        Never raises: an exception would stop the ticking service for good."""
        self.last_tick_at = self._clock.seconds()
        if self._state.closed or self._tick_running:
            return
        if not self._state.unrecorded and self._nothing_due():
            return  # an idle tick: no step has anything to do (a replaced file is a change)
        if self._database_vanished():
            return
        self._tick_running = True
        steps = Deferred.fromCoroutine(self._tick_steps())
        steps.addErrback(lambda f: log.failure("arbiter tick failed", f))
        steps.addBoth(self._tick_done)

    def _tick_done(self, _: object) -> None:
        self._tick_running = False

    async def _tick_steps(self) -> None:
        steps = (self._record_unrecorded, self._dispatch_ready)
        for step in steps:
            if self._state.closed:
                return
            try:
                await step()
            except StorageError as e:
                # a full disk fails every tick: say so once per new error, not twice a second
                if self._step_errors.get(step.__name__) != str(e):
                    log.error("arbiter tick step {step}: {error}; trying again every tick",
                                   step=step.__name__, error=str(e))  # fmt: skip
                self._step_errors[step.__name__] = str(e)
            except Exception:
                log.failure("arbiter tick step {step} failed; trying again next tick",
                                 step=step.__name__)  # fmt: skip
            else:
                self._step_errors.pop(step.__name__, None)

    def _database_vanished(self) -> bool:
        """Whether the database file is no longer the one opened; logged once."""
        if self._database_gone is None:
            self._database_gone = self._database_problem()
            if self._database_gone is not None:
                log.error("delivery stopped: {error}", error=self._database_gone)
        return self._database_gone is not None

    async def _record_unrecorded(self) -> None:
        for target in list(self._state.unrecorded):
            if target not in self._in_flight:  # a drain of it records it itself
                await self._outcomes.retry_record(target)

    async def _dispatch_ready(self) -> None:
        if self._nothing_due():
            return
        for target in await self._db.read(SwarmRepository.ready_targets, self._now_ms()):
            if self.runtimes.of(target).may_take_now(target):
                self.kick(target)

    def opencode_back(self) -> None:
        """An outage of opencode ended: every due target is drained now, not at the next
        tick."""
        self._state.waiting_for_opencode.clear()
        if self.running:
            self.tick()

    def kick(self, target: str) -> None:
        """See :meth:`start_drain`."""
        self.start_drain(target)

    def start_drain(self, target: str) -> bool:
        """Start draining ``target`` unless a hand-off to it is already in flight, its
        last failure could not be recorded and is waited out, or it was tried in the
        outage of opencode under way less than ``outage_retry_s`` ago (its messages wait,
        due, for :meth:`opencode_back`).  A hand-off still to be recorded is recorded
        first; until it is, the drain sends nothing.  Whether a drain of ``target`` runs
        (or ran at once) after the call: one in flight reads its queue once more."""
        state = self._state
        if target in self._in_flight:
            state.kicked_in_flight.add(target)
            state.kicks.kicked(target)
            return True
        if state.stopping or self._database_vanished():
            return False
        until = state.waiting_for_opencode.get(target)
        if until is not None:
            if self._opencode_down() and until > self._now_ms():
                return False
            del state.waiting_for_opencode[target]
        if state.held_until_ms.get(target, 0) > self._now_ms():
            return False
        state.held_until_ms.pop(target, None)
        drain = Deferred.fromCoroutine(self._drains.drain(target))
        drain.addBoth(self._drain_ended, target)
        if drain.called:
            # finished synchronously: nothing is in flight, and the errback
            # below must still see a failure
            drain.addErrback(self._log_drain_failure, target)
            return True
        self._in_flight[target] = drain
        drain.addErrback(self._log_drain_failure, target)
        drain.addBoth(self._release, target)
        return True

    def drained(self, target: str) -> Deferred[None] | None:
        """The drain of ``target`` in flight, if one is (fires when it ends)."""
        return self._in_flight.get(target)

    def _drain_ended(self, result: object, target: str) -> object:
        self.runtimes.of(target).drain_ended(target)
        return result

    def _now_ms(self) -> int:
        return self._outcomes.now_ms()

    def _release(self, result: object, target: str) -> object:
        self._in_flight.pop(target, None)
        self._state.kicked_in_flight.discard(target)
        return result

    def _log_drain_failure(self, failure: Failure, target: str) -> None:
        log.failure("delivery to {target} stopped on an error", failure, target=target)
