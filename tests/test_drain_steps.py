"""One trip to the writer per drain step: the hand-off just taken is recorded, and the next
due head read and its intent committed, in one transaction (pigeond/storage/drain_steps.py,
pigeond/delivery/drain.py); a batch claimed ahead that does not go has its intent cleared."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.delivery.arbiter import Arbiter, DeliveryPolicy
from pigeond.delivery.drain import AHEAD_FRESH_MS
from pigeond.delivery.grouping import NextRead, StepAsk, drain_steps
from pigeond.delivery.prompt_mode import DEFAULT_MODE
from pigeond.model import NO_MODE, StoredMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from pigeond.storage.drain_steps import DrainStep
from testkit.messages import new_message
from tests.arbiter_harness import (
    TICK_S,
    FakeRegistry,
    Harness,
    InMemoryOpencode,
    SlowModes,
    make_harness,
)

pytestmark = pytest.mark.both_backends

NOW_MS = 10_000


def queued(repo: SwarmRepository, *msg_ids: str, to: str = "ses_target", **fields: Any) -> None:
    for msg_id in msg_ids:
        repo.accept(new_message(to, msg_id=msg_id, **fields), NOW_MS)


def intent_at(repo: SwarmRepository, msg_id: str) -> int | None:
    stored = repo.get(msg_id)
    assert stored is not None
    return stored.handoff_intent_at


def all_of(i: int, due: list[StoredMessage]) -> list[str]:
    return [m.msg_id for m in due]


# -- the storage call -------------------------------------------------------------------


def test_a_step_records_the_hand_off_and_claims_the_next_head(repo: SwarmRepository) -> None:
    """The prompt taken is handed_off, and the next head is read and its intent marked."""
    queued(repo, "msg_1", "msg_2", "msg_3")
    repo.mark_handoff_intents([(["msg_1"], NOW_MS)])
    step = DrainStep("ses_target", NOW_MS + 5, (["msg_1"], NOW_MS + 5, None, NO_MODE),
                     read_limit=10)  # fmt: skip
    [result] = repo.drain_steps([step], all_of)
    assert (result.handed_off, result.claimed) == (["msg_1"], ["msg_2", "msg_3"])
    assert repo.get("msg_1").state == "handed_off"  # type: ignore[union-attr]
    assert [intent_at(repo, m) for m in ("msg_2", "msg_3")] == [NOW_MS + 5, NOW_MS + 5]


def test_only_what_choose_names_is_claimed(repo: SwarmRepository) -> None:
    """The caller's cut of the head is claimed; the rest stays without an intent."""
    queued(repo, "msg_1", "msg_2")
    [result] = repo.drain_steps(
        [DrainStep("ses_target", NOW_MS, read_limit=10)], lambda i, due: [due[0].msg_id]
    )
    assert ([m.msg_id for m in result.due], result.claimed) == (["msg_1", "msg_2"], ["msg_1"])
    assert intent_at(repo, "msg_2") is None


def test_a_head_in_doubt_is_read_and_not_claimed(repo: SwarmRepository) -> None:
    """A head holding a message whose last hand-off's outcome is unknown is left alone."""
    queued(repo, "msg_1", "msg_2")
    repo.mark_handoff_intents([(["msg_1"], NOW_MS - 5000)])
    [result] = repo.drain_steps([DrainStep("ses_target", NOW_MS, read_limit=10)], all_of)
    assert (len(result.due), result.claimed) == (2, [])
    assert (intent_at(repo, "msg_1"), intent_at(repo, "msg_2")) == (NOW_MS - 5000, None)


def test_released_intents_are_cleared(repo: SwarmRepository) -> None:
    """Intents claimed ahead for a batch that did not go are cleared: due, not in doubt."""
    queued(repo, "msg_1")
    repo.mark_handoff_intents([(["msg_1"], NOW_MS)])
    repo.drain_steps([DrainStep("ses_target", NOW_MS + 5, released=["msg_1"])], all_of)
    assert intent_at(repo, "msg_1") is None


def test_a_step_that_fails_writes_nothing(repo: SwarmRepository) -> None:
    """All or nothing: a failure after the record rolls the record back too."""
    queued(repo, "msg_1", "msg_2")

    def broken(i: int, due: list[StoredMessage]) -> list[str]:
        raise RuntimeError("the cut failed")

    step = DrainStep("ses_target", NOW_MS, (["msg_1"], NOW_MS, None, NO_MODE), read_limit=10)
    with pytest.raises(RuntimeError):
        repo.drain_steps([step], broken)
    assert (repo.get("msg_1").state, intent_at(repo, "msg_2")) == ("queued", None)  # type: ignore[union-attr]


# -- the drain ------------------------------------------------------------------------------


class CountingDatabase(InlineDatabase):
    """Names every call the arbiter makes of it, writes and reads apart."""

    def __init__(self, repo: SwarmRepository) -> None:
        super().__init__(repo)
        self.writes: list[str] = []
        self.reads: list[str] = []

    def write(self, call: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        self.writes.append(call.__name__)
        return super().write(call, *args, **kwargs)

    def read(self, call: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        self.reads.append(call.__name__)
        return super().read(call, *args, **kwargs)


def test_each_batch_costs_one_trip_to_the_writer(repo: SwarmRepository, clock: Clock) -> None:
    """Three batches to one target: its first read and claim, then each record with the
    next read and claim; no intent or queue read of their own."""
    db, opencode = CountingDatabase(repo), InMemoryOpencode()
    arbiter = Arbiter(db, FakeRegistry(), opencode, clock, check_directory=lambda d: None,
                      transcripts=opencode,
                      policy=DeliveryPolicy(tick_s=TICK_S, batch_max=1))  # fmt: skip
    queued(repo, "msg_1", "msg_2", "msg_3")
    arbiter.kick("ses_target")
    for _ in range(3):
        opencode.succeed_all()
    assert [p.msg_ids() for p in opencode.prompts] == [["msg_1"], ["msg_2"], ["msg_3"]]
    assert db.writes == ["drain_steps"] * 4 and "ready_batches" not in db.reads


def claimed_ahead(repo: SwarmRepository, clock: Clock) -> tuple[Harness, SlowModes]:
    """msg_1 handed off and recorded, msg_2 read and claimed with that record, and its
    target getting ready for it (its mode asked, the answer held)."""
    modes = SlowModes()
    h = make_harness(repo, clock, modes=modes)
    h.send(msg_id="msg_1")
    h.send(msg_id="msg_2")
    h.arbiter.kick("ses_target")
    modes.waiting.pop().callback(DEFAULT_MODE)
    h.opencode.succeed_all()
    return h, modes


def test_a_batch_claimed_ahead_is_released_when_the_drain_stops(
    repo: SwarmRepository, clock: Clock
) -> None:
    """Stopping while the target gets ready for a batch claimed ahead clears its intent:
    nothing of it went, nothing of it is in doubt."""
    h, modes = claimed_ahead(repo, clock)
    assert intent_at(repo, "msg_2") is not None
    h.arbiter.stop()
    modes.waiting.pop().callback(DEFAULT_MODE)
    assert [p.msg_ids() for p in h.opencode.prompts] == [["msg_1"]]
    assert (h.state("msg_2"), intent_at(repo, "msg_2")) == ("queued", None)


def test_a_claim_kept_waiting_is_read_again(repo: SwarmRepository, clock: Clock) -> None:
    """A batch claimed ahead whose target took longer than AHEAD_FRESH_MS to get ready is
    released and the queue read again: an urgent message sent meanwhile goes first."""
    h, modes = claimed_ahead(repo, clock)
    clock.advance(AHEAD_FRESH_MS / 1000 + 0.01)
    h.send(msg_id="msg_urgent", priority="urgent")
    modes.waiting.pop().callback(DEFAULT_MODE)
    assert [p.msg_ids() for p in h.opencode.prompts] == [["msg_1"], ["msg_urgent"]]
    assert intent_at(repo, "msg_2") is None


def test_a_write_of_steps_is_one_call(repo: SwarmRepository) -> None:
    """Several targets' steps go to the writer as one call, each answered apart."""
    queued(repo, "msg_a", to="ses_a")
    queued(repo, "msg_b", to="ses_b")

    def whole(due: list[StoredMessage]) -> tuple[list[StoredMessage], list[str]]:
        return due, [m.msg_id for m in due]

    answers = drain_steps(repo, [StepAsk(t, NOW_MS, next=NextRead(10, whole))
                                 for t in ("ses_a", "ses_b")])  # fmt: skip
    assert [[m.msg_id for m in a.messages] for a in answers] == [["msg_a"], ["msg_b"]]
    assert [a.texts for a in answers] == [["msg_a"], ["msg_b"]]
