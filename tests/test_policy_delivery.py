"""Held messages and the arbiter: never handed off, no attempt spent, released in order
(the arbiter on the fake clock, opencode in memory)."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from pigeond.consent import Policy
from pigeond.storage import SwarmRepository
from tests.arbiter_harness import TICK_S, make_harness

pytestmark = pytest.mark.both_backends
B, FRIEND = "ses_b", "ses_friend"


def test_the_arbiter_hands_off_nothing_held_and_spends_no_attempt(
    repo: SwarmRepository, clock: Clock
) -> None:
    """Under hold the tick prompts nothing; the held message keeps 0 attempts."""
    h = make_harness(repo, clock, batch_max=10)
    msg_id = h.send(B)
    repo.set_policy(B, Policy.HOLD, (), h.now_ms(), "operator")
    for _ in range(5):
        h.arbiter.tick()
        clock.advance(TICK_S)
    held = repo.get(msg_id)
    assert h.prompts_to(B) == [] and held is not None
    assert (held.state, held.attempts) == ("queued", 0)


def test_an_allowed_sender_is_delivered_past_the_held_ones(
    repo: SwarmRepository, clock: Clock
) -> None:
    """Under hold, the tick hands off only the allowed sender's message."""
    h = make_harness(repo, clock, batch_max=10)
    h.send(B)
    repo.set_policy(B, Policy.HOLD, (FRIEND,), h.now_ms(), "operator")  # holds what waits
    allowed = h.send(B, sender=FRIEND)
    h.arbiter.tick()
    [prompt] = h.prompts_to(B)
    assert prompt.msg_ids() == [allowed]


def test_accept_releases_the_held_messages_to_the_arbiter_in_order(
    repo: SwarmRepository, clock: Clock
) -> None:
    """After accept the next tick hands every held message off, in accept order, in one batch."""
    h = make_harness(repo, clock, batch_max=10)
    first, second = h.send(B), h.send(B)
    repo.set_policy(B, Policy.HOLD, (), h.now_ms(), "operator")  # holds what waits
    h.arbiter.tick()
    assert h.prompts_to(B) == []
    repo.set_policy(B, Policy.ACCEPT, (), h.now_ms(), "operator")
    h.arbiter.tick()
    [prompt] = h.prompts_to(B)
    assert prompt.msg_ids() == [first, second]
