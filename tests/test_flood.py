"""The flood guard: the per-target queue cap and the per-sender token bucket, on a fake clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest.mock import ANY

import pytest
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.web.http_headers import Headers

from pigeond.api import buckets
from pigeond.api.callers import TCP_CALLER
from pigeond.api.flood import TARGET_FULL_RETRY_AFTER_S, FloodGuard
from pigeond.api.web import HttpError
from pigeond.config import Config
from pigeond.model import NewMessage
from pigeond.storage import AcceptOutcome, SwarmRepository
from pigeond.storage.database import InlineDatabase
from pigeond.storage.errors import StorageUnavailable
from pigeond.storage.repository import QueueLimits
from testkit.messages import new_message
from tests.flood_helpers import admit, route
from tests.http_helpers import result_of

pytestmark = pytest.mark.both_backends

BASE = "http://pigeond.test"
JSON_HEADERS = Headers({"Content-Type": ["application/json"]})
NO_LIMITS = {"max_queued_per_target": 0, "sender_rate_per_s": 0.0, "sender_burst": 0}

MakeGuard = Callable[..., FloodGuard]


@pytest.fixture
def make_guard(repo: SwarmRepository, clock: Clock) -> MakeGuard:
    """A guard on the test's repository and clock; every limit off unless given."""

    def make(**limits: float) -> FloodGuard:
        settings = NO_LIMITS | limits
        return FloodGuard(
            InlineDatabase(repo),
            clock,
            max_queued_per_target=int(settings["max_queued_per_target"]),
            sender_rate_per_s=float(settings["sender_rate_per_s"]),
            sender_burst=int(settings["sender_burst"]),
        )

    return make


def offer(guard: FloodGuard, repo: SwarmRepository, clock: Clock, message: NewMessage) -> int:
    """The status a client would see for ``message``: 202 (stored or a retry) or the 429."""
    try:
        admit(guard, repo, clock, message)
    except HttpError as e:
        return e.status
    return 202


def refusal(
    guard: FloodGuard, repo: SwarmRepository, clock: Clock, message: NewMessage
) -> HttpError:
    with pytest.raises(HttpError) as caught:
        admit(guard, repo, clock, message)
    return caught.value


def offer_many(
    guard: FloodGuard, repo: SwarmRepository, clock: Clock, n: int, **fields: Any
) -> list[int]:
    return [offer(guard, repo, clock, new_message(**fields)) for _ in range(n)]


# -- the per-target cap ------------------------------------------------------------


def test_cap_refuses_the_message_past_it(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """The (N+1)th queued message to a target gets 429 with Retry-After and is not stored."""
    guard = make_guard(max_queued_per_target=3)
    assert offer_many(guard, repo, clock, 3) == [202] * 3
    extra = new_message(msg_id="msg_extra")
    error = refusal(guard, repo, clock, extra)
    assert error.status == 429
    assert "max_queued_per_target" in error.message and "ses_target" in error.message
    assert error.extra == {"retry_after_s": TARGET_FULL_RETRY_AFTER_S}
    assert error.headers == {"Retry-After": str(TARGET_FULL_RETRY_AFTER_S)}
    assert repo.get("msg_extra") is None
    assert repo.count_queued_for("ses_target") == 3


def test_cap_leaves_other_targets_alone(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """A full target does not stop sends to another one."""
    guard = make_guard(max_queued_per_target=2)
    assert offer_many(guard, repo, clock, 3, to="ses_full") == [202, 202, 429]
    assert offer_many(guard, repo, clock, 2, to="ses_other") == [202, 202]


def test_handed_off_messages_free_room(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """Once a queued message is handed off, the target takes one more."""
    guard = make_guard(max_queued_per_target=2)
    first = new_message()
    assert offer(guard, repo, clock, first) == 202
    assert offer_many(guard, repo, clock, 2) == [202, 429]
    assert repo.mark_handed_off(first.msg_id, int(clock.seconds() * 1000))
    assert offer_many(guard, repo, clock, 2) == [202, 429]


def test_a_channel_send_leaves_out_a_member_at_its_cap(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """A channel send is never refused for the cap: a member at it gets no copy, the others
    do, and each copy counts against its member's cap."""
    guard = make_guard(max_queued_per_target=2)
    for member in ("ses_target", "ses_other"):
        repo.join_channel("general", member, int(clock.seconds() * 1000), 32)
    assert offer_many(guard, repo, clock, 2) == [202, 202]  # ses_target is at its cap
    channel = new_message(channel="general")
    assert offer(guard, repo, clock, channel) == 202
    fan_out = repo.fan_out_of(channel.msg_id)
    assert [d.to_session for d in fan_out.deliveries] == ["ses_other"]
    assert [s.session for s in fan_out.skipped] == ["ses_target"]
    assert offer_many(guard, repo, clock, 2, to="ses_other") == [202, 429]


def test_cap_refusal_spends_no_sender_token(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """A send refused because its target is full leaves the sender's bucket as it was."""
    guard = make_guard(max_queued_per_target=1, sender_rate_per_s=1.0, sender_burst=2)
    assert offer_many(guard, repo, clock, 3, to="ses_full") == [202, 429, 429]
    assert offer_many(guard, repo, clock, 2, to="ses_other") == [202, 429]
    assert "sender_rate_per_s" in refusal(guard, repo, clock, new_message("ses_third")).message


# -- the per-sender bucket ----------------------------------------------------------


def test_burst_then_refuse(make_guard: MakeGuard, repo: SwarmRepository, clock: Clock) -> None:
    """A sender gets its burst at once; the next send is 429 naming the options, not stored."""
    guard = make_guard(sender_rate_per_s=1.0, sender_burst=3)
    assert offer_many(guard, repo, clock, 3) == [202] * 3
    extra = new_message(msg_id="msg_extra")
    error = refusal(guard, repo, clock, extra)
    assert error.status == 429
    assert "sender_rate_per_s" in error.message and "sender_burst" in error.message
    assert "ses_sender" in error.message
    assert repo.get("msg_extra") is None


def test_bucket_refills_over_time(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """Tokens come back at the configured rate, and never beyond the burst."""
    guard = make_guard(sender_rate_per_s=2.0, sender_burst=2)
    assert offer_many(guard, repo, clock, 3) == [202, 202, 429]
    clock.advance(0.5)
    assert offer_many(guard, repo, clock, 2) == [202, 429]
    clock.advance(3600)
    assert offer_many(guard, repo, clock, 3) == [202, 202, 429]


def test_retry_after_is_whole_seconds_until_a_token(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """Retry-After rounds the wait for the next token up to whole seconds, at least 1."""
    guard = make_guard(sender_rate_per_s=0.25, sender_burst=1)
    assert offer(guard, repo, clock, new_message()) == 202
    waits = []
    for step in (0.0, 1.5, 0.5, 1.9):
        clock.advance(step)
        error = refusal(guard, repo, clock, new_message())
        assert error.headers == {"Retry-After": str(error.extra["retry_after_s"])}
        waits.append(error.extra["retry_after_s"])
    assert waits == [4, 3, 2, 1]  # 4 s, 2.5 s, 2 s and 0.1 s to go
    clock.advance(0.1)
    assert offer(guard, repo, clock, new_message()) == 202


def test_retry_after_is_at_least_one_second(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """A fast rate still answers Retry-After: 1, never 0."""
    guard = make_guard(sender_rate_per_s=100.0, sender_burst=1)
    assert offer(guard, repo, clock, new_message()) == 202
    assert refusal(guard, repo, clock, new_message()).headers == {"Retry-After": "1"}


def test_senders_are_independent(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """One sender's empty bucket does not slow another sender."""
    guard = make_guard(sender_rate_per_s=1.0, sender_burst=2)
    assert offer_many(guard, repo, clock, 3, sender="ses_loop") == [202, 202, 429]
    assert offer_many(guard, repo, clock, 2, sender="ses_calm") == [202, 202]


# -- turning guards off --------------------------------------------------------------


def test_zero_cap_means_no_cap(make_guard: MakeGuard, repo: SwarmRepository, clock: Clock) -> None:
    """max_queued_per_target = 0 lets a target's queue grow without bound."""
    guard = make_guard(max_queued_per_target=0)
    assert offer_many(guard, repo, clock, 50) == [202] * 50


@pytest.mark.parametrize(
    ("rate", "burst"), [(0.0, 100), (10.0, 0)], ids=["rate-zero", "burst-zero"]
)
def test_zero_rate_or_burst_means_no_sender_limit(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock, rate: float, burst: int
) -> None:
    """sender_rate_per_s = 0 or sender_burst = 0 turns the sender limit off."""
    guard = make_guard(sender_rate_per_s=rate, sender_burst=burst)
    assert offer_many(guard, repo, clock, 150) == [202] * 150
    assert guard.tracked_senders == 0


def test_all_guards_off_reads_nothing(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """With every limit at 0 the guard reads nothing and asks the store for no cap."""
    guard = make_guard()
    repo.close()  # any read would now raise
    caps: list[QueueLimits] = []

    def store(limits: QueueLimits) -> Deferred[AcceptOutcome]:
        caps.append(limits)
        return succeed(AcceptOutcome.STORED)

    outcome = result_of(Deferred.fromCoroutine(guard.admit(new_message(), store, TCP_CALLER)))
    assert (outcome, caps) == (AcceptOutcome.STORED, [QueueLimits()])


def test_with_sender_tokens_left_the_guard_reads_nothing(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """A sender with tokens costs no database read: only the store, with the cap, is asked."""
    guard = make_guard(max_queued_per_target=5, sender_rate_per_s=1.0, sender_burst=2)
    repo.close()  # any read would now raise
    caps: list[QueueLimits] = []

    def store(limits: QueueLimits) -> Deferred[AcceptOutcome]:
        caps.append(limits)
        return succeed(AcceptOutcome.STORED)

    for _ in range(2):
        result_of(Deferred.fromCoroutine(guard.admit(new_message(), store, TCP_CALLER)))
    assert caps == [QueueLimits(per_target=5)] * 2


# -- retries of stored messages -----------------------------------------------------


def test_retry_of_a_stored_msg_id_passes_over_the_limits(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """Re-sending a stored msg_id is not refused, though sender and target are both over."""
    guard = make_guard(max_queued_per_target=1, sender_rate_per_s=1.0, sender_burst=1)
    stored = new_message(msg_id="msg_once")
    assert offer(guard, repo, clock, stored) == 202
    assert refusal(guard, repo, clock, new_message()).status == 429
    assert admit(guard, repo, clock, stored) is AcceptOutcome.DUPLICATE
    assert repo.count_queued_for("ses_target") == 1


def test_a_retry_costs_the_sender_no_token(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """A re-sent msg_id, answered as a duplicate, gives back the token it took."""
    guard = make_guard(sender_rate_per_s=1.0, sender_burst=2)
    first = new_message(msg_id="msg_first")
    assert offer(guard, repo, clock, first) == 202
    assert admit(guard, repo, clock, first) is AcceptOutcome.DUPLICATE
    assert offer_many(guard, repo, clock, 2) == [202, 429]


def test_a_failed_store_costs_the_sender_no_token(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """A store that fails (a 503 for the client) gives back the sender's token."""
    guard = make_guard(sender_rate_per_s=1.0, sender_burst=1)

    def failing(limits: QueueLimits) -> Deferred[AcceptOutcome]:
        return fail(StorageUnavailable("disk gone"))

    with pytest.raises(StorageUnavailable):
        result_of(Deferred.fromCoroutine(guard.admit(new_message(), failing, TCP_CALLER)))
    assert offer(guard, repo, clock, new_message()) == 202


# -- memory -----------------------------------------------------------------------------


def test_refilled_buckets_are_forgotten(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """Only senders seen within burst/rate seconds keep a bucket, however many names pass."""
    guard = make_guard(sender_rate_per_s=10.0, sender_burst=5)  # full again after 0.5 s
    for i in range(1000):
        admit(guard, repo, clock, new_message(sender=f"ses_name{i}"))
        clock.advance(0.01)
        assert guard.tracked_senders <= 51
    clock.advance(0.5)
    admit(guard, repo, clock, new_message(sender="ses_last"))
    assert guard.tracked_senders == 1


def test_tracked_senders_never_exceed_the_hard_bound(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Distinct names at one instant stop at MAX_TRACKED_KEYS, the oldest forgotten."""
    monkeypatch.setattr(buckets, "MAX_TRACKED_KEYS", 100)
    guard = make_guard(sender_rate_per_s=1.0, sender_burst=1)
    for i in range(500):
        admit(guard, repo, clock, new_message(sender=f"ses_name{i}"))
    assert guard.tracked_senders == 100
    assert refusal(guard, repo, clock, new_message(sender="ses_name499")).status == 429
    admit(guard, repo, clock, new_message(sender="ses_name0"))  # forgotten: a full bucket again


# -- reloads ---------------------------------------------------------------------------


def test_configure_changes_limits_live(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """configure() tightens and loosens both limits for the very next send."""
    guard = make_guard(max_queued_per_target=10)
    assert offer_many(guard, repo, clock, 3) == [202] * 3
    guard.configure(Config(max_queued_per_target=3, sender_rate_per_s=0.0, sender_burst=0))
    assert offer(guard, repo, clock, new_message()) == 429
    guard.configure(Config(max_queued_per_target=0, sender_rate_per_s=1.0, sender_burst=2))
    assert offer_many(guard, repo, clock, 3) == [202, 202, 429]
    guard.configure(Config(max_queued_per_target=0, sender_rate_per_s=0.0, sender_burst=0))
    assert offer(guard, repo, clock, new_message()) == 202


# -- through the routes --------------------------------------------------------------


def test_route_answers_429_with_retry_after(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """Over the cap, the route answers 429, a JSON error naming the option, and Retry-After."""
    api = route(repo, clock, make_guard(max_queued_per_target=1))
    assert api.send(msg_id="msg_first")[0] == 202
    status, body, retry_after = api.send(msg_id="msg_second")
    assert status == 429
    assert "max_queued_per_target" in body["error"]
    assert body["retry_after_s"] == TARGET_FULL_RETRY_AFTER_S
    assert retry_after == [str(TARGET_FULL_RETRY_AFTER_S)]
    assert repo.get("msg_second") is None


def test_route_retry_of_a_stored_message_still_gets_202(
    make_guard: MakeGuard, repo: SwarmRepository, clock: Clock
) -> None:
    """A client that lost its 202 and re-sends the same msg_id gets 202 again, over the limit."""
    api = route(
        repo, clock, make_guard(max_queued_per_target=1, sender_rate_per_s=1, sender_burst=1)
    )
    assert api.send(msg_id="msg_once")[0] == 202
    assert api.send(msg_id="msg_once")[:2] == (
        202, {"accepted": True, "msg_id": "msg_once", "thread": ANY, "target_checked": False}
    )  # fmt: skip


def test_a_runaway_loop_stores_at_most_the_cap(repo: SwarmRepository, clock: Clock) -> None:
    """1,100 sends from one sender to one target at the allowed rate store the cap, 1,000."""
    guard = FloodGuard(
        InlineDatabase(repo),
        clock,
        max_queued_per_target=1000,
        sender_rate_per_s=10.0,
        sender_burst=100,
    )
    api = route(repo, clock, guard)
    statuses = []
    for _ in range(1100):
        statuses.append(api.send()[0])
        clock.advance(0.1)
    assert statuses == [202] * 1000 + [429] * 100
    assert repo.count_queued_for("ses_target") == 1000


def test_a_burst_from_one_sender_stores_only_the_burst(repo: SwarmRepository, clock: Clock) -> None:
    """110 sends from one sender at one instant, default limits: 100 stored, then 429s."""
    guard = FloodGuard(
        InlineDatabase(repo),
        clock,
        max_queued_per_target=1000,
        sender_rate_per_s=10.0,
        sender_burst=100,
    )
    api = route(repo, clock, guard)
    answers = [api.send() for _ in range(110)]
    assert [status for status, _, _ in answers] == [202] * 100 + [429] * 10
    _, body, retry_after = answers[-1]
    assert "sender_rate_per_s" in body["error"] and body["retry_after_s"] == 1
    assert retry_after == ["1"]
    assert repo.count_queued_for("ses_target") == 100
