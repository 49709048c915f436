"""Open permission requests in storage (swarm_permissions), on both backends."""

from __future__ import annotations

import pytest

from pigeond.storage import SwarmRepository
from testkit.messages import new_message
from tests.permission_helpers import SENDER, SESSION, permission_request

pytestmark = pytest.mark.both_backends


def test_a_recorded_request_is_listed_with_what_it_asks(repo: SwarmRepository) -> None:
    """Recorded once, the request is listed with its command, message and sender."""
    assert repo.record_permission(permission_request()) is True
    [listed] = repo.open_permissions()
    assert listed == permission_request()
    assert listed.subject == "bash `rm -rf build`"
    assert listed.view()["from"] == SENDER and listed.view()["msg_id"] == "msg_handled"


def test_recording_a_request_again_keeps_the_first(repo: SwarmRepository) -> None:
    """An event seen twice (or an event and a poll) records one request."""
    repo.record_permission(permission_request(asked_at=1_000))
    assert repo.record_permission(permission_request(asked_at=2_000)) is False
    assert [r.asked_at for r in repo.open_permissions()] == [1_000]


def test_closing_a_request_removes_it_once(repo: SwarmRepository) -> None:
    """Closed, a request is gone; closing it again says it was not there."""
    repo.record_permission(permission_request())
    assert repo.close_permission("per_one") is True
    assert repo.close_permission("per_one") is False
    assert repo.open_permissions() == [] and repo.open_permission("per_one") is None


def test_requests_are_listed_oldest_first(repo: SwarmRepository) -> None:
    """The listing is by when each was asked."""
    repo.record_permission(permission_request("per_late", asked_at=5_000))
    repo.record_permission(permission_request("per_early", asked_at=1_000))
    assert [r.request_id for r in repo.open_permissions()] == ["per_early", "per_late"]


def test_a_message_knows_the_request_its_target_waits_on(repo: SwarmRepository) -> None:
    """permission_waited_on finds the open request of the message being handled."""
    repo.record_permission(permission_request(msg_id="msg_a"))
    waited = repo.permission_waited_on("msg_a")
    assert waited is not None and waited.request_id == "per_one"
    assert repo.permission_waited_on("msg_other") is None


def test_handling_lists_unanswered_recent_hand_offs_newest_first(repo: SwarmRepository) -> None:
    """The messages a session may be handling: handed off since, unanswered, newest first."""
    for msg_id, at in (("msg_old", 1_000), ("msg_mid", 5_000), ("msg_new", 6_000)):
        repo.accept(new_message(SESSION, msg_id=msg_id, sender=SENDER), at)
        repo.mark_handed_off(msg_id, at, at + 60_000)
    repo.accept(new_message(SESSION, msg_id="msg_queued"), 7_000)
    assert repo.handling(SESSION, 4_000) == [("msg_new", SENDER), ("msg_mid", SENDER)]


def test_an_answered_message_is_not_being_handled(repo: SwarmRepository) -> None:
    """Once its turn answered it, a message is no longer what the session handles."""
    repo.accept(new_message(SESSION, msg_id="msg_done", sender=SENDER), 1_000)
    repo.mark_handed_off("msg_done", 1_000, 61_000)
    repo.mark_verified(["msg_done"], 1_100)
    repo.mark_answered({"msg_done": "msg_reply"}, 1_200)
    assert repo.handling(SESSION, 0) == []
