"""How a drain hands batches to a runtime that steers (opencode 2.x): which go as steer,
that steering and queued messages never share a batch, and that a steer ends the wait
after a hand-off; on the arbiter, a fake clock and a real repository."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.internet.task import Clock

from pigeond.consent import Policy
from pigeond.delivery.arbiter import Arbiter, DeliveryPolicy
from pigeond.delivery.grouping import drain_steps
from pigeond.delivery.opencode_transcript import envelope_ids
from pigeond.delivery.runtime import Delivery, Prepared, TranscriptSource
from pigeond.delivery.steering import steering_allowed
from pigeond.model import NO_MODE, HandoffMode, Runtime
from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.database import InlineDatabase
from testkit.messages import new_message
from tests.arbiter_harness import FakeRegistry, InMemoryOpencode
from tests.fixed_time import now_ms

TARGET = "ses_target"


@dataclass
class SteeringRuntime:
    """A runtime that steers: records each hand-off's msg_ids and delivery; its wait after
    a hand-off lasts until the test ends it (or the drain cancels it)."""

    name: Runtime = Runtime.OPENCODE
    steers: bool = True
    transcripts: TranscriptSource | None = None
    handed: list[tuple[list[str], Delivery]] = field(default_factory=list)
    waits: list[Deferred[None]] = field(default_factory=list)
    cancelled: int = 0

    def may_take_now(self, target: str) -> bool:
        return True

    async def prepare(self, target: str) -> Prepared | None:
        return Prepared(False, None)

    async def hand_off(self, target: str, prepared: Prepared, texts: Sequence[str], *,
                       delivery: Delivery = Delivery.QUEUE) -> HandoffMode:  # fmt: skip
        self.handed.append((sorted(envelope_ids(texts)), delivery))
        return NO_MODE

    async def after_hand_off(self, target: str, prepared: Prepared) -> None:
        wait: Deferred[None] = Deferred()
        self.waits.append(wait)
        try:
            await wait
        except CancelledError:
            self.cancelled += 1

    def drain_ended(self, target: str) -> None:
        return None

    def stop(self) -> None:
        return None

    def idle(self) -> None:
        """The running turn ends."""
        for wait in self.waits:
            if not wait.called:
                wait.callback(None)


def arbiter_with(
    repo: SwarmRepository, clock: Clock, runtime: SteeringRuntime, db: InlineDatabase | None = None
) -> Arbiter:
    policy = DeliveryPolicy(tick_s=0.5, max_attempts=10, batch_max=10)
    return Arbiter(
        db or InlineDatabase(repo), FakeRegistry(), InMemoryOpencode(), clock, policy=policy,
        runtimes=[runtime],
    )  # fmt: skip


class HeldCalls(InlineDatabase):
    """Runs each read or write of ``held`` (a repository call) when asked, and answers it
    only when the test releases it (all but its first ``passed`` calls); the others at
    once."""

    def __init__(self, repo: SwarmRepository, held: Callable[..., Any], passed: int = 0) -> None:
        super().__init__(repo)
        self._call = held
        self._passed = passed
        self.held: list[tuple[Deferred[Any], Any]] = []

    def read(self, call: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        if call is self._call and self._passed > 0:
            self._passed -= 1
            return super().read(call, *args, **kwargs)
        if call is not self._call:
            return super().read(call, *args, **kwargs)
        answer: Deferred[Any] = Deferred()
        self.held.append((answer, call(self.repo, *args, **kwargs)))
        return answer

    write = read

    def release(self) -> None:
        """Answer every held call, and those asked meanwhile."""
        while self.held:
            answer, result = self.held.pop(0)
            answer.callback(result)


def accept(repo: SwarmRepository, clock: Clock, **fields: object) -> str:
    message = new_message(TARGET, **fields)  # type: ignore[arg-type]
    repo.accept(message, now_ms(clock))
    return message.msg_id


def allow_steering(repo: SwarmRepository, clock: Clock, steer: bool = True) -> None:
    repo.set_policy(TARGET, Policy.ACCEPT, (), now_ms(clock), "person", steer=steer)


def test_a_batch_asked_to_steer_and_allowed_goes_as_steer_apart_from_the_rest(
    repo: SwarmRepository, clock: Clock
) -> None:
    """Urgent messages asked to steer, to a target that allows it, are one steer batch;
    an urgent one not asked and a normal one go after it, queued, in a batch of their own."""
    allow_steering(repo, clock)
    plain = accept(repo, clock, priority="urgent")
    steers = [accept(repo, clock, priority="urgent", steer=True) for _ in range(2)]
    normal = accept(repo, clock)
    runtime = SteeringRuntime()
    arbiter_with(repo, clock, runtime).kick(TARGET)
    runtime.idle()
    runtime.idle()
    assert runtime.handed == [
        ([plain], Delivery.QUEUE),
        (sorted(steers), Delivery.STEER),
        ([normal], Delivery.QUEUE),
    ]


def test_a_batch_asked_to_steer_goes_queued_unless_the_policy_allows_it(
    repo: SwarmRepository, clock: Clock
) -> None:
    """Without the target's consent to steering, an urgent message asked to steer is queued."""
    allow_steering(repo, clock, steer=False)
    asked = accept(repo, clock, priority="urgent", steer=True)
    runtime = SteeringRuntime()
    arbiter_with(repo, clock, runtime).kick(TARGET)
    assert runtime.handed == [([asked], Delivery.QUEUE)]


def test_a_steer_ends_the_wait_after_a_queued_hand_off(repo: SwarmRepository, clock: Clock) -> None:
    """While the drain waits for the turn its queued batch started, a steer sent then goes
    at once, into that turn: the wait is cancelled, not waited out."""
    allow_steering(repo, clock)
    first = accept(repo, clock)
    runtime = SteeringRuntime()
    arbiter = arbiter_with(repo, clock, runtime)
    arbiter.kick(TARGET)
    assert runtime.handed == [([first], Delivery.QUEUE)]
    steer = accept(repo, clock, priority="urgent", steer=True)
    arbiter.kick(TARGET)
    assert runtime.handed[1:] == [([steer], Delivery.STEER)]
    assert runtime.cancelled == 1


def test_a_kick_that_brings_no_steer_leaves_the_wait_alone(
    repo: SwarmRepository, clock: Clock
) -> None:
    """A message that will be queued, sent while the drain waits, waits for the turn's end."""
    allow_steering(repo, clock)
    accept(repo, clock)
    runtime = SteeringRuntime()
    arbiter = arbiter_with(repo, clock, runtime)
    arbiter.kick(TARGET)
    second = accept(repo, clock, priority="urgent")
    arbiter.kick(TARGET)
    assert (len(runtime.handed), runtime.cancelled) == (1, 0)
    runtime.idle()
    assert runtime.handed[1:] == [([second], Delivery.QUEUE)]


def test_a_kick_while_the_queue_is_looked_at_is_heard(repo: SwarmRepository, clock: Clock) -> None:
    """A steer sent while the drain is still looking at its queue for the kick before (the
    policy read then said no) is looked at once that look ends: it goes at once."""
    allow_steering(repo, clock, steer=False)
    first = accept(repo, clock)
    db = HeldCalls(repo, steering_allowed)
    runtime = SteeringRuntime()
    arbiter = arbiter_with(repo, clock, runtime, db)
    arbiter.kick(TARGET)
    early = accept(repo, clock, priority="urgent", steer=True)
    arbiter.kick(TARGET)  # looked at: the policy read is held, and says no
    allow_steering(repo, clock)
    late = accept(repo, clock, priority="urgent", steer=True)
    arbiter.kick(TARGET)  # during that look
    db.release()
    assert runtime.handed == [([first], Delivery.QUEUE), (sorted([early, late]), Delivery.STEER)]
    assert runtime.cancelled == 1


class FailingPolicyReads(InlineDatabase):
    """A database whose read of whether a target allows steering fails."""

    def read(self, call: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        if call is steering_allowed:
            return fail(StorageError("the database is locked"))
        return super().read(call, *args, **kwargs)


def test_a_look_that_fails_ends_the_wait_with_the_drain(
    repo: SwarmRepository, clock: Clock
) -> None:
    """A look at the queue whose read fails pauses the drain, and cancels the runtime's
    wait after its hand-off: nothing of that drain keeps running."""
    first = accept(repo, clock)
    runtime = SteeringRuntime()
    arbiter = arbiter_with(repo, clock, runtime, FailingPolicyReads(repo))
    arbiter.kick(TARGET)
    accept(repo, clock, priority="urgent", steer=True)
    arbiter.kick(TARGET)
    assert (runtime.handed, runtime.cancelled) == ([([first], Delivery.QUEUE)], 1)
    assert arbiter.drained(TARGET) is None


def test_a_kick_before_the_wait_after_a_hand_off_began_is_heard(
    repo: SwarmRepository, clock: Clock
) -> None:
    """A steer sent while the queued hand-off before it is still being recorded (the drain
    not yet waiting for its turn) goes at once once the record is written."""
    allow_steering(repo, clock)
    first = accept(repo, clock)
    db = HeldCalls(repo, drain_steps, passed=1)  # the first: the batch's read
    runtime = SteeringRuntime()
    arbiter = arbiter_with(repo, clock, runtime, db)
    arbiter.kick(TARGET)  # handed off; its record held
    assert runtime.handed == [([first], Delivery.QUEUE)] and db.held
    steer = accept(repo, clock, priority="urgent", steer=True)
    arbiter.kick(TARGET)
    db.release()
    assert runtime.handed == [([first], Delivery.QUEUE), ([steer], Delivery.STEER)]
    assert runtime.cancelled == 1
