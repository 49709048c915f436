"""The budget brake (pigeond/brakes/budget.py) on the injected clock: a thread whose recorded
turns used its token or cost budget holds its next agent's message; a release's reset
starts the count over, its raise gives the thread more tokens."""

from __future__ import annotations

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.brakes.budget import BudgetBrake
from pigeond.config import Config
from pigeond.costs import EndedTurn, TurnUsage
from pigeond.model import Hold, NewMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.brake_holds import HoldOutcome, ReleaseMode
from pigeond.storage.database import InlineDatabase
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import now_ms
from tests.http_helpers import result_of
from tests.storage_helpers import seen_message

pytestmark = pytest.mark.both_backends
THREAD = "thr_budget"
A, B = "ses_a", "ses_b"


class Thread:
    """THREAD's turns, recorded as the verifier would, on the clock."""

    def __init__(self, repo: SwarmRepository, clock: Clock) -> None:
        self.repo, self.clock, self.turns = repo, clock, 0

    def turn(self, tokens: int, cost: float | None = 0.0) -> None:
        """One message of THREAD handed to B, seen, and its turn recorded a second later."""
        self.turns += 1
        msg_id = f"msg_turn{self.turns}"
        seen_message(self.repo, msg_id, now_ms(self.clock), to=B, thread=THREAD)
        self.clock.advance(1)
        usage = TurnUsage(input=tokens, cost=cost)
        self.repo.record_turns(B, [EndedTurn(f"u{self.turns}", (msg_id,), usage)],
                               now_ms(self.clock))  # fmt: skip
        self.clock.advance(1)


@pytest.fixture
def thread(repo: SwarmRepository, clock: Clock) -> Thread:
    return Thread(repo, clock)


def brake(repo: SwarmRepository, **options: float) -> BudgetBrake:
    return BudgetBrake(InlineDatabase(repo), Config(**options))  # type: ignore[arg-type]


def judge(brake: BudgetBrake, clock: Clock, sender: str = A) -> Hold | None:
    message: NewMessage = new_message(B, sender=sender)
    return result_of(Deferred.fromCoroutine(brake.judge(message, THREAD, now_ms(clock))))


def test_off_by_default(repo: SwarmRepository, clock: Clock, thread: Thread) -> None:
    """Both budgets 0: however much a thread used, nothing is held."""
    thread.turn(10**9, cost=10**6)
    assert judge(brake(repo), clock) is None


def test_a_thread_under_its_token_budget_goes(
    repo: SwarmRepository, clock: Clock, thread: Thread
) -> None:
    """49,999 tokens of a 50,000 budget: the next message goes."""
    thread.turn(30_000)
    thread.turn(19_999)
    assert judge(brake(repo, thread_budget_tokens=50_000), clock) is None


def test_a_thread_at_its_token_budget_holds_the_next_message(
    repo: SwarmRepository, clock: Clock, thread: Thread
) -> None:
    """The turns reached the budget: held, the reason saying the thread, its use and budget."""
    thread.turn(30_000)
    thread.turn(22_310)
    assert judge(brake(repo, thread_budget_tokens=50_000), clock) == Hold(
        "budget",
        f"thread {THREAD} used 52,310 tokens, over its budget of 50,000; a person must release it",
    )


def test_a_thread_over_its_cost_budget_is_held(
    repo: SwarmRepository, clock: Clock, thread: Thread
) -> None:
    """Dollars as opencode priced the turns; a turn of unknown cost adds nothing to them."""
    thread.turn(10, cost=0.3)
    thread.turn(10, cost=None)
    costs = brake(repo, thread_budget_cost=0.5)
    assert judge(costs, clock) is None
    thread.turn(10, cost=0.25)
    hold = judge(costs, clock)
    assert hold is not None and "used $0.5500, over its budget of $0.5000" in hold.reason


def test_a_persons_send_is_never_held(repo: SwarmRepository, clock: Clock, thread: Thread) -> None:
    """A send from a shell (not a session) is the person the brake waits for."""
    thread.turn(100)
    assert judge(brake(repo, thread_budget_tokens=10), clock, sender="alice") is None


def test_a_reload_changes_the_budget(repo: SwarmRepository, clock: Clock, thread: Thread) -> None:
    """configure: the next judgement uses the new budget (0 turns it off)."""
    thread.turn(100)
    judged = brake(repo, thread_budget_tokens=1000)
    assert judge(judged, clock) is None
    judged.configure(Config(thread_budget_tokens=100))
    assert judge(judged, clock) is not None
    judged.configure(Config(thread_budget_tokens=0))
    assert judge(judged, clock) is None


def hold_one(repo: SwarmRepository, clock: Clock, hold: Hold) -> str:
    """The message the brake held, stored held."""
    message = new_message(B, sender=A)
    repo.accept_many([Accept(message, now_ms(clock), thread_id=THREAD, brake_hold=hold)])
    return message.msg_id


def test_a_release_with_reset_counts_the_budget_from_then(
    repo: SwarmRepository, clock: Clock, thread: Thread
) -> None:
    """reset: the turns before the release no longer count; the ones after do."""
    thread.turn(150)
    judged = brake(repo, thread_budget_tokens=100)
    hold = judge(judged, clock)
    assert hold is not None
    held = hold_one(repo, clock, hold)
    clock.advance(1)
    release = repo.release_brake_hold(held, ReleaseMode.RESET, 0, now_ms(clock))
    assert release.outcome is HoldOutcome.DONE
    clock.advance(1)
    assert judge(judged, clock) is None
    thread.turn(99)
    assert judge(judged, clock) is None
    thread.turn(1)
    assert judge(judged, clock) is not None


def test_a_release_with_raise_gives_the_thread_more_tokens(
    repo: SwarmRepository, clock: Clock, thread: Thread
) -> None:
    """raise N: the thread may use N tokens more than it had used (150 + 100), its own
    budget from then on."""
    thread.turn(150)
    judged = brake(repo, thread_budget_tokens=100)
    hold = judge(judged, clock)
    assert hold is not None
    held = hold_one(repo, clock, hold)
    release = repo.release_brake_hold(held, ReleaseMode.RAISE, 100, now_ms(clock))
    assert release.outcome is HoldOutcome.DONE
    assert judge(judged, clock) is None
    thread.turn(99)
    assert judge(judged, clock) is None
    thread.turn(1)
    hold = judge(judged, clock)
    assert hold is not None and "used 250 tokens, over its budget of 250;" in hold.reason
    stored = repo.thread(THREAD)
    assert stored is not None and stored.token_budget == 250
