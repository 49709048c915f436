"""GET /swarm/permissions, POST /swarm/permissions/<id>/reply, and the message's
waiting_on_permission, through the daemon's API (in memory, on a Clock)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock

from pigeond.api.permissions import PermissionRoutes
from pigeond.api.web import JsonApi
from pigeond.config import Config
from pigeond.model import PermissionAnswerOutcome
from pigeond.service.daemon import Daemon
from testkit.messages import new_message
from tests.http_helpers import API, daemon_call, result_of, stub_client
from tests.permission_helpers import SENDER, SESSION, permission_request
from tests.storage_helpers import clock_daemon, repo_of


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Daemon:
    """A daemon with delivery off: its list is read, nothing can be answered."""
    return clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)


class FakeAnswerer:
    """The watch's answer, as a test sets it; records what it was asked."""

    def __init__(self, outcome: PermissionAnswerOutcome) -> None:
        self.outcome = outcome
        self.asked: list[tuple[str, str]] = []

    async def answer(self, request_id: str, reply: str) -> tuple[PermissionAnswerOutcome, str]:
        self.asked.append((request_id, reply))
        return self.outcome, f"{request_id}: {self.outcome.value}"


def reply(daemon: Daemon, answerer: FakeAnswerer, request_id: str, body: Any) -> tuple[int, Any]:
    """POST .../reply to the daemon's routes with ``answerer`` answering."""
    api = PermissionRoutes(daemon.db, answerer).install(JsonApi())
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    path = f"{API}/swarm/permissions/{request_id}/reply"
    response = result_of(stub_client(api).request("POST", path, data=data))
    return int(response.code), json.loads(result_of(response.content()))


def test_the_list_shows_each_open_request_with_what_it_handles(daemon: Daemon) -> None:
    """GET /swarm/permissions: the request, its command, the message and its sender."""
    repo_of(daemon).record_permission(permission_request())
    status, body = daemon_call(daemon, "GET", "/swarm/permissions")
    assert status == 200
    [entry] = body["permissions"]
    assert entry["id"] == "per_one" and entry["session"] == SESSION
    assert (entry["patterns"], entry["msg_id"], entry["from"]) == (
        ["rm -rf build"], "msg_handled", SENDER,
    )  # fmt: skip


def test_a_message_says_its_target_waits_on_a_permission(daemon: Daemon) -> None:
    """GET /swarm/message: waiting_on_permission names the request; null for others."""
    repo = repo_of(daemon)
    for msg_id in ("msg_handled", "msg_other"):
        repo.accept(new_message(SESSION, msg_id=msg_id, sender=SENDER), 1_000)
    repo.record_permission(permission_request())
    _, waiting = daemon_call(daemon, "GET", "/swarm/message/msg_handled")
    assert waiting["waiting_on_permission"]["id"] == "per_one"
    _, other = daemon_call(daemon, "GET", "/swarm/message/msg_other")
    assert other["waiting_on_permission"] is None


def test_an_answer_to_a_request_not_open_is_a_404(daemon: Daemon) -> None:
    """No open request by that id (answered already, never asked): 404, delivery or not."""
    status, body = daemon_call(
        daemon, "POST", "/swarm/permissions/per_one/reply", {"answer": "once"}
    )
    assert status == 404 and body["error"] == "no open permission request per_one"


def test_with_delivery_off_nothing_can_be_answered(daemon: Daemon) -> None:
    """503: there is no opencode to give the answer to."""
    repo_of(daemon).record_permission(permission_request())
    status, body = daemon_call(
        daemon, "POST", "/swarm/permissions/per_one/reply", {"answer": "once"}
    )
    assert status == 503 and "delivery is off" in body["error"]


@pytest.mark.parametrize(
    ("request_id", "body", "error"),
    [
        ("nonsense", {"answer": "once"}, "the request id must match"),
        ("per_one", {"answer": "maybe"}, "field 'answer' must be one of once, always, reject"),
        ("per_one", {}, "field 'answer' must be one of"),
        ("per_one", b"not json", ""),
    ],
)
def test_a_malformed_answer_is_a_400(
    daemon: Daemon, request_id: str, body: Any, error: str
) -> None:
    """A bad id, answer or body: 400 with the reason, and nothing asked of opencode."""
    answerer = FakeAnswerer(PermissionAnswerOutcome.ANSWERED)
    status, answer = reply(daemon, answerer, request_id, body)
    assert status == 400 and error in answer["error"] and answerer.asked == []


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (PermissionAnswerOutcome.ANSWERED, 200),
        (PermissionAnswerOutcome.UNKNOWN, 404),
        (PermissionAnswerOutcome.GONE, 409),
        (PermissionAnswerOutcome.TURN_ENDED, 409),
        (PermissionAnswerOutcome.REFUSED, 502),
        (PermissionAnswerOutcome.UNREACHABLE, 503),
    ],
)
def test_each_outcome_of_an_answer_has_its_status(
    daemon: Daemon, outcome: PermissionAnswerOutcome, status: int
) -> None:
    """answered 200; unknown 404; gone or stale 409; opencode refused 502, away 503."""
    repo_of(daemon).record_permission(permission_request())
    answerer = FakeAnswerer(outcome)
    got, body = reply(daemon, answerer, "per_one", {"answer": "always"})
    assert got == status and answerer.asked == [("per_one", "always")]
    if status == 200:
        assert body == {"id": "per_one", "answer": "always", "outcome": "answered"}
    else:
        assert body["error"] == f"per_one: {outcome.value}"
