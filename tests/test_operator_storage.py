"""The operator's reads and conditional state changes in the storage layer."""

from __future__ import annotations

import pytest

from pigeond.model import State
from pigeond.storage import SwarmRepository
from pigeond.storage.operator import ActionOutcome
from testkit.messages import new_message
from tests.fixed_time import NOW_MS
from tests.storage_helpers import accept_channel_alone

pytestmark = pytest.mark.both_backends
TTL = 3_600_000


def _failed(
    repo: SwarmRepository, msg_id: str, to: str = "ses_target", sender: str = "ses_sender"
) -> None:
    repo.accept(new_message(to, msg_id=msg_id, sender=sender), NOW_MS, expires_at=NOW_MS + TTL)
    repo.record_failed_attempt(msg_id, "boom", NOW_MS + 1, None)


def _queued(repo: SwarmRepository, msg_id: str, to: str = "ses_target") -> None:
    repo.accept(new_message(to, msg_id=msg_id), NOW_MS, expires_at=NOW_MS + TTL)


def _state(repo: SwarmRepository, msg_id: str) -> str:
    message = repo.get(msg_id)
    assert message is not None
    return message.state


def test_requeue_resets_a_failed_message_and_keeps_requeue_count(repo: SwarmRepository) -> None:
    """requeue: failed → queued, due now, attempts 0, error and verify_by cleared, TTL renewed."""
    _failed(repo, "msg_a")
    repo.connection.execute("UPDATE swarm_messages SET requeue_count = 2 WHERE msg_id = 'msg_a'")
    assert repo.requeue("msg_a", NOW_MS + 500) is ActionOutcome.CHANGED
    message = repo.get("msg_a")
    assert message is not None
    assert (message.state, message.attempts, message.requeue_count) == ("queued", 0, 2)
    assert (message.next_retry_at, message.updated_at) == (NOW_MS + 500, NOW_MS + 500)
    assert (message.last_error, message.verify_by) == (None, None)
    assert message.expires_at == NOW_MS + 500 + TTL
    assert [m.msg_id for m in repo.ready_batch("ses_target", NOW_MS + 500, 10)] == ["msg_a"]


def test_requeue_takes_an_expired_message(repo: SwarmRepository) -> None:
    """requeue: an expired message comes back and is not expired again by the sweeper."""
    _queued(repo, "msg_a")
    assert repo.expire_due(NOW_MS + TTL) == ["msg_a"]
    later = NOW_MS + 2 * TTL
    assert repo.requeue("msg_a", later) is ActionOutcome.CHANGED
    assert repo.expire_due(later + 1) == []
    assert _state(repo, "msg_a") == "queued"


def test_requeue_refuses_a_queued_message(repo: SwarmRepository) -> None:
    """requeue of a message that is not failed or expired changes nothing."""
    _queued(repo, "msg_a")
    before = repo.get("msg_a")
    assert repo.requeue("msg_a", NOW_MS + 5) is ActionOutcome.WRONG_STATE
    assert repo.get("msg_a") == before


def test_unknown_message_is_reported(repo: SwarmRepository) -> None:
    """Each per-id action reports an unknown msg_id as UNKNOWN."""
    assert repo.requeue("msg_nope", NOW_MS) is ActionOutcome.UNKNOWN
    assert repo.retry_now("msg_nope", NOW_MS) is ActionOutcome.UNKNOWN
    assert repo.cancel("msg_nope", NOW_MS) is ActionOutcome.UNKNOWN


def test_stale_updated_at_changes_nothing(repo: SwarmRepository) -> None:
    """A row changed since the operator read it (other updated_at) is left alone."""
    _failed(repo, "msg_a")
    _queued(repo, "msg_b")
    before_a, before_b = repo.get("msg_a"), repo.get("msg_b")
    assert before_a is not None and before_b is not None
    assert repo.requeue("msg_a", NOW_MS + 9, before_a.updated_at - 1) is ActionOutcome.STALE
    assert repo.retry_now("msg_b", NOW_MS + 9, before_b.updated_at - 1) is ActionOutcome.STALE
    assert repo.cancel("msg_b", NOW_MS + 9, before_b.updated_at - 1) is ActionOutcome.STALE
    assert (repo.get("msg_a"), repo.get("msg_b")) == (before_a, before_b)


def test_matching_updated_at_changes_the_row(repo: SwarmRepository) -> None:
    """The updated_at the operator saw, still current, lets the change through."""
    _queued(repo, "msg_a")
    seen = repo.get("msg_a")
    assert seen is not None
    assert repo.cancel("msg_a", NOW_MS + 9, seen.updated_at) is ActionOutcome.CHANGED


def test_retry_now_makes_only_that_message_due(repo: SwarmRepository) -> None:
    """retry-now: a queued message waiting out a backoff becomes due now; others untouched."""
    _queued(repo, "msg_a")
    _queued(repo, "msg_b", to="ses_other")
    repo.record_outage(["msg_a", "msg_b"], "down", NOW_MS + 1, NOW_MS + 60_000)
    other = repo.get("msg_b")
    assert repo.retry_now("msg_a", NOW_MS + 2) is ActionOutcome.CHANGED
    message = repo.get("msg_a")
    assert message is not None
    assert (message.next_retry_at, message.updated_at, message.state) == (
        NOW_MS + 2,
        NOW_MS + 2,
        "queued",
    )
    assert repo.get("msg_b") == other
    assert repo.ready_targets(NOW_MS + 2) == ["ses_target"]


def test_retry_now_refuses_a_failed_message(repo: SwarmRepository) -> None:
    """retry-now of a message that is not queued changes nothing."""
    _failed(repo, "msg_a")
    before = repo.get("msg_a")
    assert repo.retry_now("msg_a", NOW_MS + 5) is ActionOutcome.WRONG_STATE
    assert repo.get("msg_a") == before


def test_cancel_ends_a_queued_message_without_a_notice(repo: SwarmRepository) -> None:
    """cancel: queued → cancelled with updated_at, no notice queued to the sender."""
    _queued(repo, "msg_a")
    assert repo.cancel("msg_a", NOW_MS + 7) is ActionOutcome.CHANGED
    message = repo.get("msg_a")
    assert message is not None
    assert (message.state, message.updated_at, message.next_retry_at) == (
        State.CANCELLED, NOW_MS + 7, None,
    )  # fmt: skip
    assert [m.msg_id for m in repo.list_messages()] == ["msg_a"]


def test_cancel_refuses_a_handed_off_message(repo: SwarmRepository) -> None:
    """cancel of a message already handed off changes nothing."""
    _queued(repo, "msg_a")
    repo.mark_handed_off("msg_a", NOW_MS + 1)
    before = repo.get("msg_a")
    assert repo.cancel("msg_a", NOW_MS + 5) is ActionOutcome.WRONG_STATE
    assert repo.get("msg_a") == before


def test_cancelled_rows_are_never_ready(repo: SwarmRepository) -> None:
    """A cancelled message is in neither ready_targets nor ready_batch, nor expired later."""
    _queued(repo, "msg_a")
    _queued(repo, "msg_b")
    repo.cancel("msg_a", NOW_MS + 1)
    assert [m.msg_id for m in repo.ready_batch("ses_target", NOW_MS + 2, 10)] == ["msg_b"]
    repo.cancel("msg_b", NOW_MS + 2)
    assert repo.ready_targets(NOW_MS + 3) == []
    assert repo.ready_batch("ses_target", NOW_MS + 3, 10) == []
    assert repo.expire_due(NOW_MS + 2 * TTL) == []


def test_requeue_target_changes_only_that_targets_failed_and_expired(
    repo: SwarmRepository,
) -> None:
    """Bulk requeue by target: its failed and expired rows only, not queued or other targets."""
    _failed(repo, "msg_f")
    _queued(repo, "msg_e")
    repo.expire_due(NOW_MS + TTL)
    _queued(repo, "msg_q")
    _failed(repo, "msg_other", to="ses_other")
    assert repo.requeue_target("ses_target", NOW_MS + TTL + 1) == ["msg_e", "msg_f"]
    assert _state(repo, "msg_other") == "failed"
    assert repo.requeue_target("ses_target", NOW_MS + TTL + 2) == []


def test_retry_now_target_and_cancel_target(repo: SwarmRepository) -> None:
    """Bulk retry-now and cancel by target touch that target's queued rows only."""
    _queued(repo, "msg_a")
    _queued(repo, "msg_b")
    _failed(repo, "msg_f")
    _queued(repo, "msg_other", to="ses_other")
    assert repo.retry_now_target("ses_target", NOW_MS + 3) == ["msg_a", "msg_b"]
    assert repo.cancel_target("ses_target", NOW_MS + 4) == ["msg_a", "msg_b"]
    assert _state(repo, "msg_f") == "failed"
    assert _state(repo, "msg_other") == "queued"


def test_list_messages_filters_newest_first_with_limit(repo: SwarmRepository) -> None:
    """list_messages: newest accepted first, filtered by state, target (or channel), sender."""
    _queued(repo, "msg_1")
    _failed(repo, "msg_2", to="ses_other", sender="cron")  # no notice: not a session
    accept_channel_alone(repo, new_message(channel="ops", msg_id="msg_3", sender="bot"), NOW_MS)
    _queued(repo, "msg_4")
    assert [m.msg_id for m in repo.list_messages()] == ["msg_4", "msg_3", "msg_2", "msg_1"]
    assert [m.msg_id for m in repo.list_messages(limit=2)] == ["msg_4", "msg_3"]
    assert [m.msg_id for m in repo.list_messages(state="failed")] == ["msg_2"]
    assert [m.msg_id for m in repo.list_messages(target="ses_target")] == ["msg_4", "msg_1"]
    assert [m.msg_id for m in repo.list_messages(target="ops")] == ["msg_3"]
    assert [m.msg_id for m in repo.list_messages(sender="bot")] == ["msg_3"]


def test_counts_and_queued_per_target(repo: SwarmRepository) -> None:
    """Channel counts apart from direct ones; queued per target with the oldest first."""
    repo.accept(new_message("ses_b", msg_id="msg_b1"), NOW_MS)
    repo.accept(new_message("ses_a", msg_id="msg_a1"), NOW_MS + 10)
    repo.accept(new_message("ses_b", msg_id="msg_b2"), NOW_MS + 20)
    accept_channel_alone(repo, new_message(channel="ops", msg_id="msg_c"), NOW_MS)
    assert repo.count_channel_by_state() == {"fanned_out": 1}
    assert repo.count_by_state() == {"queued": 3}
    summary = [(t.target, t.queued, t.oldest_created_at) for t in repo.queued_per_target(NOW_MS)]
    assert summary == [("ses_b", 2, NOW_MS), ("ses_a", 1, NOW_MS + 10)]


def test_search_matches_text_literally(repo: SwarmRepository) -> None:
    """Search finds text in payload, target or sender; % and _ are literal, not wildcards."""
    repo.accept(new_message("ses_a", msg_id="msg_1", payload="100% done_x"), NOW_MS)
    repo.accept(new_message("ses_a", msg_id="msg_2", payload="100 doneXx"), NOW_MS)
    repo.accept(new_message("ses_zeta", msg_id="msg_3", payload="other"), NOW_MS)
    assert [m.msg_id for m in repo.search_messages(None, "100%", 10)] == ["msg_1"]
    assert [m.msg_id for m in repo.search_messages(None, "done_", 10)] == ["msg_1"]
    assert [m.msg_id for m in repo.search_messages("queued", "zeta", 10)] == ["msg_3"]
    assert repo.search_messages("failed", "100", 10) == []


def test_failed_per_target_shows_the_latest_error(repo: SwarmRepository) -> None:
    """Failed messages are counted per target with the error of the latest failure."""
    repo.accept(new_message("ses_a", msg_id="msg_1", sender="cli"), NOW_MS)
    repo.accept(new_message("ses_a", msg_id="msg_2", sender="cli"), NOW_MS)
    repo.record_failed_attempt("msg_1", "old error", NOW_MS + 1, None)
    repo.record_failed_attempt("msg_2", "new error", NOW_MS + 2, None)
    [row] = repo.failed_per_target()
    assert (row.target, row.failed, row.latest_at, row.latest_error) == (
        "ses_a", 2, NOW_MS + 2, "new error",
    )  # fmt: skip
