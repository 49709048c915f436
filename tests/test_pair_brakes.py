"""The pair brakes on a Clock (pigeond/brakes/pair.py): the per-pair rate over a sliding
minute and the repeated payloads between two sessions, their limits, window edges and
resets, and what they never brake."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.brakes import pair as pair_brakes
from pigeond.brakes import similarity
from pigeond.brakes.pair import PairRateBrake, RepeatBrake, window_words
from pigeond.config import Config
from pigeond.model import NOTICE_KIND, NOTICE_SENDER, Hold
from pigeond.storage import SwarmRepository
from pigeond.storage.brake_holds import pair_scope
from pigeond.storage.database import InlineDatabase
from testkit.messages import new_message
from tests.fixed_time import now_ms
from tests.http_helpers import result_of

pytestmark = pytest.mark.both_backends
A, B, C = "ses_A", "ses_B", "ses_C"
THREAD = "thr_test"
LIMITS = Config(max_pair_messages_per_minute=3, max_repeats_per_pair=4, repeat_window_s=600)


@dataclass
class Pair:
    """Two brakes on one database and clock."""

    repo: SwarmRepository
    clock: Clock

    def __post_init__(self) -> None:
        db = InlineDatabase(self.repo)
        self.rate = PairRateBrake(db, LIMITS)
        self.repeat = RepeatBrake(db, LIMITS)

    def reset(self, one: str, other: str) -> None:
        """A person resets the pair now (as a release with ``reset`` records it)."""
        self.repo.set_brake_reset(pair_scope(one, other), now_ms(self.clock))

    def sent(self, sender: str, target: str, payload: str = "hi", count: int = 1) -> None:
        """``count`` messages stored now, as accepted sends."""
        for _ in range(count):
            self.repo.accept(
                new_message(target, sender=sender, payload=payload), now_ms(self.clock)
            )

    def rate_says(
        self, sender: str, target: str, *, kind: str = "chat", channel: str | None = None
    ) -> Hold | None:
        message = new_message(target, sender=sender, kind=kind, channel=channel)
        return result_of(
            Deferred.fromCoroutine(self.rate.judge(message, THREAD, now_ms(self.clock)))
        )

    def repeat_says(self, sender: str, target: str, payload: str) -> Hold | None:
        message = new_message(target, sender=sender, payload=payload)
        judged = self.repeat.judge(message, THREAD, now_ms(self.clock))
        return result_of(Deferred.fromCoroutine(judged))


@pytest.fixture
def pair(repo: SwarmRepository, clock: Clock) -> Pair:
    return Pair(repo, clock)


# -- the rate -----------------------------------------------------------------------


def test_the_limit_itself_is_allowed(pair: Pair) -> None:
    """With limit - 1 sent in the minute, the limit-th message goes."""
    pair.sent(A, B, count=2)
    assert pair.rate_says(A, B) is None


def test_the_message_past_the_limit_is_held_with_its_reason(pair: Pair) -> None:
    """With the limit sent in the minute, the next is held, and the reason says so."""
    pair.sent(A, B, count=3)
    assert pair.rate_says(A, B) == Hold(
        "pair_rate",
        "ses_A sent 4 messages to ses_B in the last minute (limit 3); a person must release it",
    )


def test_the_default_reason_reads_as_the_design_says(repo: SwarmRepository, clock: Clock) -> None:
    """With the defaults (30 a minute) the 31st message's reason is the design's wording."""
    pair = Pair(repo, clock)
    pair.rate.configure(Config())
    pair.sent(A, B, count=30)
    hold = pair.rate_says(A, B)
    assert hold is not None and hold.reason == (
        "ses_A sent 31 messages to ses_B in the last minute (limit 30); a person must release it"
    )


def test_a_message_a_minute_old_has_left_the_window(pair: Pair) -> None:
    """The window slides: the oldest message leaves it exactly 60 s after it was sent."""
    pair.sent(A, B)
    pair.clock.advance(30)
    pair.sent(A, B, count=2)
    pair.clock.advance(29.999)
    assert pair.rate_says(A, B) is not None
    pair.clock.advance(0.001)
    assert pair.rate_says(A, B) is None


def test_a_reset_starts_the_count_over(pair: Pair) -> None:
    """After a person's reset of the pair, only messages sent after it count."""
    pair.sent(A, B, count=3)
    pair.clock.advance(1)
    pair.reset(B, A)  # either order names the pair
    assert pair.rate_says(A, B) is None
    pair.clock.advance(1)
    pair.sent(A, B, count=3)
    assert pair.rate_says(A, B) is not None


def test_the_rate_is_one_direction_to_one_target(pair: Pair) -> None:
    """B's messages to A and A's to C do not count against A → B."""
    pair.sent(B, A, count=3)
    pair.sent(A, C, count=3)
    assert pair.rate_says(A, B) is None


def test_a_person_and_pigeond_are_never_braked(pair: Pair) -> None:
    """A shell's send (no session id) and pigeond's notices go whatever the count."""
    pair.sent("alice", B, count=5)
    assert pair.rate_says("alice", B) is None
    assert pair.rate_says(NOTICE_SENDER, B, kind=NOTICE_KIND) is None


def test_a_channel_send_is_not_braked(pair: Pair) -> None:
    """A channel send has no one target: the pair brakes leave it alone."""
    pair.sent(A, B, count=5)
    assert pair.rate_says(A, B, channel="team") is None


def test_a_reload_changes_the_limit_and_0_turns_it_off(pair: Pair) -> None:
    """configure takes a reload's limit at once; 0 is no limit."""
    pair.sent(A, B, count=3)
    pair.rate.configure(replace(LIMITS, max_pair_messages_per_minute=4))
    assert pair.rate_says(A, B) is None
    pair.rate.configure(replace(LIMITS, max_pair_messages_per_minute=0))
    pair.sent(A, B, count=10)
    assert pair.rate_says(A, B) is None


# -- repeats ------------------------------------------------------------------------


def test_repeats_within_the_limit_go(pair: Pair) -> None:
    """With limit - 1 near-identical payloads exchanged, the limit-th goes."""
    pair.sent(A, B, "re: thanks (msg_1)", count=3)
    assert pair.repeat_says(A, B, "re: thanks (msg_9)") is None


def test_the_repeat_past_the_limit_is_held_with_its_reason(pair: Pair) -> None:
    """Repeats either way count: the limit + 1st is held, and the reason says so."""
    pair.sent(A, B, "Thanks! (msg_1)", count=2)
    pair.sent(B, A, "thanks!   (msg_2)", count=2)
    assert pair.repeat_says(A, B, "THANKS! (msg_3)") == Hold(
        "repeat",
        "ses_A and ses_B exchanged 5 near-identical messages in 10 min (limit 4);"
        " a person must release it",
    )


def test_the_default_repeat_reason_reads_as_the_design_says(
    repo: SwarmRepository, clock: Clock
) -> None:
    """With the defaults (16 in 600 s) the 17th repeat's reason is the design's wording."""
    pair = Pair(repo, clock)
    pair.repeat.configure(Config())
    pair.sent(B, A, "you're welcome!", count=16)
    hold = pair.repeat_says(A, B, "You're welcome!")
    assert hold is not None and hold.reason == (
        "ses_A and ses_B exchanged 17 near-identical messages in 10 min (limit 16);"
        " a person must release it"
    )


def test_different_payloads_are_not_repeats(pair: Pair) -> None:
    """Many messages that differ from the new one hold nothing."""
    for i, word in enumerate(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]):
        pair.sent(A, B, f"step {i}: {word} is done, next comes the review of part {word}")
    assert pair.repeat_says(A, B, "all done; shall I merge?") is None


def test_a_repeat_older_than_the_window_has_left_it(pair: Pair) -> None:
    """repeat_window_s slides: a repeat exactly that old no longer counts."""
    pair.sent(A, B, "ping")
    pair.clock.advance(100)
    pair.sent(A, B, "ping", count=3)
    pair.clock.advance(499.999)
    assert pair.repeat_says(A, B, "ping") is not None
    pair.clock.advance(0.001)
    assert pair.repeat_says(A, B, "ping") is None


def test_a_reset_starts_the_repeats_over(pair: Pair) -> None:
    """After a person's reset of the pair, only repeats sent after it count."""
    pair.sent(A, B, "ping", count=4)
    pair.clock.advance(1)
    pair.reset(A, B)
    assert pair.repeat_says(A, B, "ping") is None


def test_repeats_of_another_pair_do_not_count(pair: Pair) -> None:
    """A's repeats to C are not A and B's."""
    pair.sent(A, C, "ping", count=4)
    assert pair.repeat_says(A, B, "ping") is None


def test_repeats_off_at_0(pair: Pair) -> None:
    """max_repeats_per_pair 0, or repeat_window_s 0, turns the brake off."""
    pair.sent(A, B, "ping", count=6)
    pair.repeat.configure(replace(LIMITS, max_repeats_per_pair=0))
    assert pair.repeat_says(A, B, "ping") is None
    pair.repeat.configure(replace(LIMITS, repeat_window_s=0))
    assert pair.repeat_says(A, B, "ping") is None


def test_a_judgement_out_of_time_holds_nothing_and_says_so(
    pair: Pair, monkeypatch: pytest.MonkeyPatch, logged: list[str]
) -> None:
    """When comparing takes longer than its budget, the repeats not yet found do not hold
    the message, and the log says the judgement was cut short."""
    pair.sent(A, B, "pong", count=4)
    pair.sent(A, B, "ping")  # the newest, compared first
    assert pair.repeat_says(A, B, "pong") is not None  # in time: four repeats
    out_of_time = functools.partial(similarity.count_repeats, budget_s=0)
    monkeypatch.setattr(pair_brakes, "count_repeats", out_of_time)
    assert pair.repeat_says(A, B, "pong") is None  # out of time after the first
    assert any("repeat brake: comparing ses_A's payload" in line for line in logged), logged


def test_a_person_is_never_braked_for_repeats(pair: Pair) -> None:
    """A shell's repeated sends go."""
    pair.sent("alice", B, "ping", count=6)
    assert pair.repeat_says("alice", B, "ping") is None


@pytest.mark.parametrize(
    ("seconds", "words"), [(600, "10 min"), (60, "1 min"), (90, "90 s"), (7200, "2 h")]
)
def test_a_window_reads_as_a_person_says_it(seconds: int, words: str) -> None:
    """The reason names the window in its largest whole unit."""
    assert window_words(seconds) == words
