"""The hop brake (pigeond/brakes/hops.py) on a Clock: a thread's agents' sends go until
max_hops_per_thread, the next is held; a person's send or own prompt starts it over."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.brakes import Hold, HopBrake, first_hold
from pigeond.config import Config
from pigeond.model import NewMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.brake_holds import ReleaseMode
from pigeond.storage.database import InlineDatabase
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import now_ms
from tests.http_helpers import result_of
from tests.storage_helpers import inline_database

A, B = "ses_a", "ses_b"
THREAD = "thr_loop"


@dataclass
class FakePrompts:
    """A PersonPrompts whose answers the test sets: session → ms (or an exception)."""

    at: dict[str, int] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)
    asked: list[str] = field(default_factory=list)

    async def last_person_prompt(self, session: str) -> int | None:
        self.asked.append(session)
        if session in self.failing:
            raise RuntimeError("transcript unreadable")
        return self.at.get(session)


@pytest.fixture
def db(tmp_path: Path) -> InlineDatabase:
    return inline_database(tmp_path / "p.db")


def store(db: InlineDatabase, clock: Clock, message: NewMessage, hold: Hold | None) -> None:
    """Accept ``message`` into THREAD as the send path does with the brake's verdict."""
    db.repo.accept_many([Accept(message, now_ms(clock), None, thread_id=THREAD, brake_hold=hold)])


def judge(brake: HopBrake, clock: Clock, message: NewMessage) -> Hold | None:
    return result_of(Deferred.fromCoroutine(brake.judge(message, THREAD, now_ms(clock))))


def exchange(db: InlineDatabase, brake: HopBrake, clock: Clock, count: int) -> list[Hold | None]:
    """``count`` sends back and forth between A and B, a second apart, each judged and then
    stored as judged; the verdicts."""
    verdicts = []
    for i in range(count):
        message = new_message(B if i % 2 == 0 else A, sender=A if i % 2 == 0 else B)
        verdict = judge(brake, clock, message)
        store(db, clock, message, verdict)
        verdicts.append(verdict)
        clock.advance(1)
    return verdicts


def test_sends_go_until_the_limit_and_the_next_is_held(db: InlineDatabase, clock: Clock) -> None:
    """With a limit of 4, four agents' sends go and the fifth is held with its reason."""
    brake = HopBrake(db, Config(max_hops_per_thread=4), None)
    verdicts = exchange(db, brake, clock, 5)
    assert verdicts[:4] == [None] * 4
    assert verdicts[4] == Hold(
        "hops", f"thread {THREAD} reached 4 hops without a person; a person must release it"
    )


def test_held_sends_are_no_hops_and_stay_held(db: InlineDatabase, clock: Clock) -> None:
    """Past the limit every agent's send is held, and the count stays at the limit."""
    brake = HopBrake(db, Config(max_hops_per_thread=2), None)
    verdicts = exchange(db, brake, clock, 5)
    assert [v is None for v in verdicts] == [True, True, False, False, False]
    thread = db.repo.thread(THREAD)
    assert thread is not None and (thread.hops, thread.held) == (2, 3)


def test_zero_turns_the_brake_off(db: InlineDatabase, clock: Clock) -> None:
    """max_hops_per_thread = 0: nothing is ever held."""
    brake = HopBrake(db, Config(max_hops_per_thread=0), None)
    assert exchange(db, brake, clock, 30) == [None] * 30


def test_a_reload_changes_the_limit(db: InlineDatabase, clock: Clock) -> None:
    """configure takes the new max_hops_per_thread from the next send on."""
    brake = HopBrake(db, Config(max_hops_per_thread=2), None)
    exchange(db, brake, clock, 2)
    brake.configure(Config(max_hops_per_thread=3))
    verdicts = exchange(db, brake, clock, 2)
    assert verdicts[0] is None and verdicts[1] is not None
    assert "reached 3 hops" in verdicts[1].reason


def test_a_persons_send_is_never_held_and_resets(db: InlineDatabase, clock: Clock) -> None:
    """A send from a shell (no session id) goes at the limit, and the agents start over."""
    brake = HopBrake(db, Config(max_hops_per_thread=2), None)
    exchange(db, brake, clock, 2)
    person = new_message(A, sender="alice")
    assert judge(brake, clock, person) is None
    store(db, clock, person, None)
    assert [v is None for v in exchange(db, brake, clock, 3)] == [True, True, False]


def test_a_raised_thread_limit_is_the_threads_own(db: InlineDatabase, clock: Clock) -> None:
    """A thread whose limit a person raised goes on to that limit."""
    brake = HopBrake(db, Config(max_hops_per_thread=2), None)
    verdicts = exchange(db, brake, clock, 3)
    [held] = db.repo.held_messages()
    db.repo.release_brake_hold(held.msg_id, ReleaseMode.RAISE, 2, now_ms(clock))
    assert verdicts[2] is not None
    assert [v is None for v in exchange(db, brake, clock, 3)] == [True, True, False]


def test_transcripts_are_read_only_at_the_limit(db: InlineDatabase, clock: Clock) -> None:
    """Below the limit no session is asked for a person's prompt."""
    prompts = FakePrompts()
    brake = HopBrake(db, Config(max_hops_per_thread=3), prompts)
    exchange(db, brake, clock, 3)
    assert prompts.asked == []
    exchange(db, brake, clock, 1)
    assert sorted(prompts.asked) == [A, B]


def test_a_persons_prompt_since_the_reset_lets_the_send_go(
    db: InlineDatabase, clock: Clock
) -> None:
    """A prompt of a person newer than the thread's reset resets it from its time."""
    prompts = FakePrompts()
    brake = HopBrake(db, Config(max_hops_per_thread=3), prompts)
    exchange(db, brake, clock, 3)
    prompted_at = now_ms(clock) - 500
    prompts.at[B] = prompted_at
    assert exchange(db, brake, clock, 1) == [None]
    thread = db.repo.thread(THREAD)
    assert thread is not None and (thread.hops, thread.reset_at) == (1, prompted_at)


def test_a_prompt_before_the_reset_changes_nothing(db: InlineDatabase, clock: Clock) -> None:
    """A person's prompt older than the thread's start (or last reset) does not reset it."""
    prompts = FakePrompts(at={A: now_ms(clock) - 60_000})
    brake = HopBrake(db, Config(max_hops_per_thread=2), prompts)
    assert exchange(db, brake, clock, 3)[2] is not None


def test_an_unreadable_transcript_leaves_the_hold(db: InlineDatabase, clock: Clock) -> None:
    """A reader that fails for one session is no answer; another session's prompt counts."""
    prompts = FakePrompts(failing={A})
    brake = HopBrake(db, Config(max_hops_per_thread=2), prompts)
    assert exchange(db, brake, clock, 3)[2] is not None
    prompts.at[B] = now_ms(clock)
    assert exchange(db, brake, clock, 1) == [None]


def test_the_first_hold_wins(db: InlineDatabase, clock: Clock) -> None:
    """first_hold asks the brakes in order and stops at the first hold."""
    first = HopBrake(db, Config(max_hops_per_thread=1), None)
    exchange(db, first, clock, 1)

    class Never:
        asked = False

        def configure(self, config: Config) -> None:
            pass

        async def judge(self, message: NewMessage, thread_id: str, at: int) -> Hold | None:
            self.asked = True
            return Hold("never", "not asked")

    never = Never()
    verdict = result_of(
        Deferred.fromCoroutine(first_hold([first, never], new_message(B), THREAD, 0))
    )
    assert verdict is not None and verdict.brake == "hops" and never.asked is False


def test_the_repository_counts_what_the_brake_reads(db: InlineDatabase, clock: Clock) -> None:
    """The brake reads the thread the accepts keep: hops as stored."""
    exchange(db, HopBrake(db, Config(max_hops_per_thread=0), None), clock, 3)
    thread = SwarmRepository.thread(db.repo, THREAD)
    assert thread is not None and thread.hops == 3
