"""The flood guard charges the caller, not only the ``from`` field, and a channel send one
token per copy (issue 27, measurement 1), on a fake clock."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from pigeond.api.callers import TCP_CALLER
from pigeond.api.flood import FloodGuard
from pigeond.api.web import HttpError
from pigeond.config import Config
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from testkit.messages import new_message
from tests.flood_helpers import admit, route

pytestmark = pytest.mark.both_backends

CHANNEL = "crowd"
MEMBERS = [f"ses_member{i:02}" for i in range(32)]


def default_guard(repo: SwarmRepository, clock: Clock, **options: float) -> FloodGuard:
    """The guard as the daemon makes it, with the default options but ``options``."""
    return FloodGuard.from_config(InlineDatabase(repo), clock, Config(**options))  # type: ignore[arg-type]


def crowd(repo: SwarmRepository, clock: Clock) -> None:
    """A channel of 32 members: each send to it from a non-member is 32 copies."""
    for member in MEMBERS:
        repo.join_channel(CHANNEL, member, int(clock.seconds() * 1000), len(MEMBERS))


def copies(repo: SwarmRepository) -> int:
    return sum(repo.count_queued_for(member) for member in MEMBERS)


@pytest.mark.sqlite_only
def test_rotating_from_does_not_escape_the_callers_rate(
    repo: SwarmRepository, clock: Clock
) -> None:
    """20,000 sends from one client, each with a new ``from``, to 20 targets, 1 ms apart:
    past the caller's burst and rate, 429 naming caller_rate_per_s; at most
    caller_burst + caller_rate_per_s x 20 s stored."""
    config = Config()
    api = route(repo, clock, default_guard(repo, clock))
    statuses, refusals = [], []
    for i in range(20_000):
        status, body, _ = api.send(**{"from": f"ses_rot{i}", "to": f"ses_t{i % 20}"})
        statuses.append(status)
        if status == 429:
            refusals.append(body["error"])
        clock.advance(0.001)
    allowed = config.caller_burst + config.caller_rate_per_s * 20 + 1
    assert set(statuses) == {202, 429}
    assert statuses.count(202) <= allowed
    assert sum(repo.count_queued_for(f"ses_t{t}") for t in range(20)) == statuses.count(202)
    assert all("caller_rate_per_s" in e and repr(TCP_CALLER) in e for e in refusals)


def test_callers_are_independent(repo: SwarmRepository, clock: Clock) -> None:
    """One caller past its burst does not slow another caller, whatever their ``from``."""
    guard = default_guard(repo, clock, caller_burst=3, sender_rate_per_s=0)
    for i in range(3):
        admit(guard, repo, clock, new_message(sender=f"ses_a{i}"), caller="agent:100")
    with pytest.raises(HttpError) as refused:
        admit(guard, repo, clock, new_message(sender="ses_a9"), caller="agent:100")
    assert refused.value.status == 429 and "'agent:100'" in refused.value.message
    admit(guard, repo, clock, new_message(sender="ses_a9"), caller="agent:200")


def test_the_sender_bucket_still_applies_under_the_callers(
    repo: SwarmRepository, clock: Clock
) -> None:
    """One ``from`` past sender_burst is refused though its caller has tokens left."""
    guard = default_guard(repo, clock, sender_burst=2)
    for _ in range(2):
        admit(guard, repo, clock, new_message(), caller="agent:100")
    with pytest.raises(HttpError) as refused:
        admit(guard, repo, clock, new_message(), caller="agent:100")
    assert "sender_rate_per_s" in refused.value.message


def test_a_channel_send_costs_one_token_per_copy(repo: SwarmRepository, clock: Clock) -> None:
    """3,000 sends to a 32-member channel at one instant, rotating ``from``: the caller's
    bucket pays 32 a send, so 13 sends (416 copies) are stored of a burst of 400, then 429."""
    crowd(repo, clock)
    api = route(repo, clock, default_guard(repo, clock))
    statuses = [api.send(**{"from": f"ses_rot{i}", "channel": CHANNEL})[0] for i in range(3000)]
    assert statuses == [202] * 13 + [429] * 2987
    assert copies(repo) == 13 * len(MEMBERS)


def test_channel_copies_over_time_keep_to_the_callers_rate(
    repo: SwarmRepository, clock: Clock
) -> None:
    """A send every 40 ms for 60 s to a 32-member channel: copies stay within the
    caller's burst plus its rate, with one send's copies of slack."""
    crowd(repo, clock)
    config = Config()
    api = route(repo, clock, default_guard(repo, clock))
    for i in range(1500):
        api.send(**{"from": f"ses_rot{i}", "channel": CHANNEL})
        clock.advance(0.04)
    bound = config.caller_burst + config.caller_rate_per_s * 60 + len(MEMBERS)
    assert config.caller_rate_per_s * 60 <= copies(repo) <= bound


def test_a_channel_send_in_debt_waits_out_its_copies(repo: SwarmRepository, clock: Clock) -> None:
    """A caller with 1 token sends to 32 members: stored, then refused until 32 tokens came
    back at its rate, with the Retry-After to match."""
    crowd(repo, clock)
    guard = default_guard(repo, clock, caller_rate_per_s=4, caller_burst=1, sender_rate_per_s=0)
    admit(guard, repo, clock, new_message(channel=CHANNEL))
    with pytest.raises(HttpError) as refused:
        admit(guard, repo, clock, new_message(channel=CHANNEL))
    assert refused.value.extra == {"retry_after_s": 8}  # 31 tokens owed + 1, at 4 a second
    clock.advance(8)
    admit(guard, repo, clock, new_message(channel=CHANNEL))
    assert copies(repo) == 2 * len(MEMBERS)


def test_a_retried_channel_send_costs_nothing_more(repo: SwarmRepository, clock: Clock) -> None:
    """Re-sending a stored channel msg_id is answered as before and charges no copies."""
    crowd(repo, clock)
    guard = default_guard(repo, clock, caller_burst=40, sender_rate_per_s=0)
    first = new_message(channel=CHANNEL, msg_id="msg_once")
    admit(guard, repo, clock, first)
    admit(guard, repo, clock, first)
    assert guard.callers.tokens(TCP_CALLER, clock.seconds()) == 40 - len(MEMBERS)
