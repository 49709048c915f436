"""How the receipt chain is shown: the stage, ``pigeon show`` and the TUI's detail, the
OpenAPI document, ``pigeon-send --wait --until`` and the plugin's ``swarm_status``."""

from __future__ import annotations

from typing import Any

import pytest

from pigeond.api.openapi import openapi_document
from pigeond.cli import pigeon_send
from pigeond.cli.pigeon_send import DaemonAnswer, wait_for_copies, wait_for_delivery
from pigeond.cli.presentation import detail
from pigeond.model import RECEIPT_STAGES, receipt_stage
from pigeond.storage import SwarmRepository
from tests.plugin_runner import run_tool
from tests.storage_helpers import seen_message

# -- how it is shown -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "verified_at", "answered_at", "stage"),
    [
        ("queued", None, None, "accepted"),
        ("handed_off", None, None, "handed_off"),
        ("handed_off", 5, None, "seen"),
        ("handed_off", 5, 9, "answered"),
        ("failed", None, None, "accepted"),
    ],
)
def test_receipt_stage(
    state: str, verified_at: int | None, answered_at: int | None, stage: str
) -> None:
    """The last stage reached; only a hand-off has gone past accepted."""
    assert receipt_stage(state, verified_at, answered_at) == stage


def test_pigeon_show_lists_the_answer_and_the_receipt(repo: SwarmRepository) -> None:
    """The detail (``pigeon show``, the TUI) has answered_at as a time, its reply and stage."""
    seen_message(repo, "msg_a", 1_000)
    repo.mark_answered({"msg_a": "msg_reply1"}, 2_000)
    stored = repo.get("msg_a")
    assert stored is not None
    fields = dict(detail(stored, 3_000).fields)
    assert fields["answered_at"] == "1970-01-01 00:00:02.000Z"
    assert (fields["answer_message_id"], fields["receipt"]) == ("msg_reply1", "answered")


def test_the_openapi_document_lists_the_receipt_stages() -> None:
    """The document's receipt enum is the model's chain, in order."""
    message = openapi_document()["components"]["schemas"]["Message"]["properties"]
    assert message["receipt"]["enum"] == list(RECEIPT_STAGES)
    assert message["answered_at"]["type"] == ["integer", "null"]


@pytest.mark.parametrize(("until", "code"), [("answered", 0), ("seen", 0), ("accepted", 2)])
def test_until_takes_the_stages_past_accepted(
    monkeypatch: pytest.MonkeyPatch, until: str, code: int
) -> None:
    """--until handed_off|seen|answered; accepted (what the 202 already says) is refused."""
    answers = [DaemonAnswer(202, {"msg_id": "msg_a"}), DaemonAnswer(200, ANSWERED)]
    monkeypatch.setattr(pigeon_send, "call_daemon", lambda *a, **k: answers.pop(0))
    argv = ["--from", "ses_a", "--wait", "--until", until, "ses_b", "hi"]
    assert pigeon_send.main(argv, env={}) == code


def test_until_needs_wait() -> None:
    """--until alone is a usage error (exit 2)."""
    assert pigeon_send.main(["--from", "ses_a", "--until", "seen", "ses_b", "hi"], env={}) == 2


def answers_from(
    monkeypatch: pytest.MonkeyPatch, bodies: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The daemon answers GET /swarm/message with ``bodies``, one per poll; polls do not
    wait.  Returns the bodies not asked for."""
    left = list(bodies)

    def call_daemon(*args: object, **kwargs: object) -> DaemonAnswer:
        return DaemonAnswer(200, left.pop(0))

    monkeypatch.setattr(pigeon_send, "call_daemon", call_daemon)
    monkeypatch.setattr(pigeon_send, "WAIT_POLL_S", 0)
    return left


SEEN = {"state": "handed_off", "verified_at": 5, "answered_at": None}
ANSWERED = {"state": "handed_off", "verified_at": 5, "answered_at": 9}


def test_wait_until_answered_goes_past_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """--until answered: seen is not enough; answered exits 0."""
    left = answers_from(monkeypatch, [SEEN, SEEN, ANSWERED, ANSWERED])
    assert wait_for_delivery("http://x", "msg_a", 60, 1, until="answered") == 0
    assert left == [ANSWERED]


def test_wait_until_seen_is_met_by_an_answered_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """A later stage meets an earlier one."""
    answers_from(monkeypatch, [ANSWERED])
    assert wait_for_delivery("http://x", "msg_a", 60, 1, until="seen") == 0


def test_wait_until_answered_exits_1_when_the_message_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hand-off queued again and then failed ends the wait with exit 1."""
    failed = {"state": "failed", "verified_at": None, "last_error": "never reached"}
    answers_from(monkeypatch, [{"state": "handed_off", "verified_at": None}, failed])
    assert wait_for_delivery("http://x", "msg_a", 60, 1, until="answered") == 1


def test_wait_on_a_channel_message_follows_each_member_s_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--wait on a channel send waits for every copy the 202 listed, not the channel
    message (which stays fanned_out)."""
    asked: list[str] = []

    def call_daemon(url: str, method: str, path: str, *args: object) -> DaemonAnswer:
        asked.append(path)
        return DaemonAnswer(200, SEEN)

    monkeypatch.setattr(pigeon_send, "call_daemon", call_daemon)
    accepted = {"msg_id": "msg_ch", "deliveries": [{"msg_id": "msg_c1"}, {"msg_id": "msg_c2"}]}
    ids = pigeon_send._waited_ids("msg_ch", accepted)
    assert wait_for_copies("http://x", ids, 60, 1, until="seen") == 0
    assert asked == ["/swarm/message/msg_c1", "/swarm/message/msg_c2"]


def test_wait_on_a_channel_message_stops_at_a_copy_that_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A copy that failed ends the wait with exit 1."""
    failed = {"state": "failed", "verified_at": None, "last_error": "gone"}
    answers_from(monkeypatch, [failed])
    assert wait_for_copies("http://x", ["msg_c1", "msg_c2"], 60, 1, until="seen") == 1


@pytest.mark.slow  # runs the plugin in the opencode binary
def test_swarm_status_says_when_and_by_which_reply_a_message_was_answered() -> None:
    """The plugin's swarm_status adds the answer after the time it was seen."""
    body = {
        "msg_id": "msg_x", "to": "ses_t", "state": "handed_off", "handed_off_at": 0,
        "verified_at": 1000, "answered_at": 61_000, "answer_message_id": "msg_reply1",
    }  # fmt: skip
    run = run_tool("swarm_status", {"msg_id": "msg_x"}, replies=[{"status": 200, "body": body}])
    assert run.output == (
        "msg_x to ses_t: handed_off; handed off 1970-01-01T00:00:00Z; seen in the transcript"
        " 1970-01-01T00:00:01Z; answered 1970-01-01T00:01:01Z (reply msg_reply1)"
    )
