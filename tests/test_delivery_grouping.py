"""The arbiter's grouped database calls: one trip for what came while one was under way."""

from __future__ import annotations

import pytest
from twisted.internet.defer import Deferred, fail, succeed

from pigeond.delivery.grouping import Grouped, HandOffRecord, StepAsk, drain_steps
from pigeond.model import NO_MODE
from pigeond.storage import StorageUnavailable, SwarmRepository
from testkit.messages import new_message
from tests.fixed_time import START_S
from tests.http_helpers import failure_of, result_of

NOW_MS = int(START_S * 1000)


class Runs:
    """A ``run`` whose trips the test answers one by one."""

    def __init__(self) -> None:
        self.trips: list[tuple[list[int], Deferred[list[str]]]] = []

    def __call__(self, items: list[int]) -> Deferred[list[str]]:
        trip: Deferred[list[str]] = Deferred()
        self.trips.append((items, trip))
        return trip

    def answer(self, n: int) -> None:
        items, trip = self.trips[n]
        trip.callback([f"answer {i}" for i in items])


def test_a_call_alone_goes_at_once_and_later_ones_go_together() -> None:
    runs = Runs()
    group: Grouped[int, str] = Grouped(runs)
    first = group(1)
    assert [items for items, _ in runs.trips] == [[1]]
    later = [group(2), group(3), group(4)]
    assert len(runs.trips) == 1  # they wait for the trip under way
    runs.answer(0)
    assert result_of(first) == "answer 1"
    assert [items for items, _ in runs.trips] == [[1], [2, 3, 4]]
    runs.answer(1)
    assert [result_of(d) for d in later] == ["answer 2", "answer 3", "answer 4"]


def test_calls_made_while_answers_are_handed_out_go_in_the_next_trip() -> None:
    runs = Runs()
    group: Grouped[int, str] = Grouped(runs)
    group(1).addCallback(lambda _: [group(10), group(11)])
    group(2)
    runs.answer(0)
    assert [items for items, _ in runs.trips] == [[1], [2, 10, 11]]


def test_a_failed_trip_fails_each_of_its_calls_and_the_next_trip_still_goes() -> None:
    failing = [True]

    def run(items: list[int]) -> Deferred[list[int]]:
        if failing[0]:
            failing[0] = False
            return fail(StorageUnavailable("database is locked"))
        return succeed([i * 2 for i in items])

    group: Grouped[int, int] = Grouped(run)
    failed = group(1)
    assert failure_of(failed).check(StorageUnavailable)
    assert result_of(group(2)) == 4


def test_trips_that_answer_at_once_do_not_recurse() -> None:
    """With a database that answers on the spot (tests' InlineDatabase), a long chain of
    calls, each made from the last one's answer, runs in a loop, not deeper and deeper."""
    first: Deferred[list[int]] = Deferred()
    trips = [first]
    group: Grouped[int, int] = Grouped(lambda items: trips.pop() if trips else succeed(items))
    seen: list[int] = []

    def next_one(value: int) -> None:
        seen.append(value)
        if value < 5000:
            group(value + 1).addCallback(next_one)

    group(0).addCallback(next_one)
    first.callback([0])
    assert seen == list(range(5001))


def record(repo: SwarmRepository, *msg_ids: str) -> HandOffRecord:
    for msg_id in msg_ids:
        repo.accept(new_message("ses_t", msg_id=msg_id), NOW_MS)
    return HandOffRecord(msg_ids, NOW_MS + 5, NOW_MS + 60_000, NO_MODE)


def test_hand_offs_of_several_prompts_are_recorded_in_one_transaction(
    repo: SwarmRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [record(repo, "msg_1", "msg_2"), record(repo, "msg_3")]
    answers = drain_steps(repo, [StepAsk("ses_t", NOW_MS + 5, r) for r in records])
    assert [a.handed_off for a in answers] == [["msg_1", "msg_2"], ["msg_3"]]
    stored = [repo.get(m) for m in ("msg_1", "msg_2", "msg_3")]
    assert [(m.state, m.handed_off_at) for m in stored if m] == [("handed_off", NOW_MS + 5)] * 3
    later = [record(repo, "msg_4"), record(repo, "msg_5")]
    calls = [0]
    hand_off = SwarmRepository._hand_off

    def second_fails(self: SwarmRepository, *args: object) -> list[str]:
        calls[0] += 1
        if calls[0] == 2:
            raise StorageUnavailable("database write failed: disk is full")
        return hand_off(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(SwarmRepository, "_hand_off", second_fails)
    with pytest.raises(StorageUnavailable):
        drain_steps(repo, [StepAsk("ses_t", NOW_MS + 5, r) for r in later])
    assert [repo.get(m).state for m in ("msg_4", "msg_5")] == ["queued", "queued"]  # type: ignore[union-attr]
