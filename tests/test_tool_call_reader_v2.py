"""Reading an opencode 2.x session's recent pigeond tool calls from its 2.x transcript
(pigeond/delivery/opencode_v2_tool_calls.py, through
pigeond/delivery/tool_call_reader.py's opencode reader).

No real 2.x has been read: the fixture (tests/fixtures/opencode/v2-tool-calls.json) is
written from the v2 message types of npm ``@opencode-ai/sdk``, and
tests/test_opencode_v2_sdk_drift.py checks it against them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.delivery.failures import FailureKind, HandOffError
from pigeond.delivery.opencode_v2_tool_calls import opencode_v2_calls
from pigeond.delivery.tool_call_reader import RECENT_MESSAGES, OpencodeToolCalls
from pigeond.tool_calls import ToolCall, TranscriptUnreadable
from tests.api_dialect_helpers import build
from tests.http_helpers import failure_of, result_of
from tests.opencode_v2_reads_helpers import StubV2, found_2x
from tests.opencode_v2_standin import OpencodeV2StandIn
from tests.test_tool_call_reader import StubOpencode, read

FIXTURE = Path(__file__).parent / "fixtures" / "opencode" / "v2-tool-calls.json"
SESSION = "ses_known"


def v2_fixture() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = json.loads(FIXTURE.read_text("utf-8"))
    return messages


def reader_of(v1: StubOpencode, v2: StubV2 | None, clock: Clock | None = None) -> OpencodeToolCalls:
    return OpencodeToolCalls(v1, v1, clock or Clock(), v2=v2, deadline_s=5)


def test_a_2x_transcript_shows_the_calls_in_flight_and_finished() -> None:
    """A finished swarm_name and a running swarm_send, with the model's arguments; another
    tool's call and a call whose arguments are still being written are not counted."""
    assert opencode_v2_calls(v2_fixture()) == [
        ToolCall("call_name_01", "swarm_name", {"name": "reviewer"}, finished=True),
        ToolCall(
            "call_send_01",
            "swarm_send",
            {"to": "ses_target", "payload": "the tests pass", "channel": None},
            finished=False,
        ),
    ]


@pytest.mark.parametrize(("status", "finished"), [("running", False), ("error", True)])
def test_a_2x_call_is_finished_once_it_ended(status: str, finished: bool) -> None:
    """running: in flight; error (as completed): finished."""
    part = {"type": "tool", "id": "call_1", "name": "swarm_policy",
            "state": {"status": status, "input": {"accept": "named"}}}  # fmt: skip
    [call] = opencode_v2_calls([{"type": "assistant", "content": [part]}])
    assert call.finished is finished


def test_only_assistant_content_of_the_2x_shape_counts() -> None:
    """A tool part outside an assistant message, a 1.x-shaped part (callID, tool), or junk
    is no 2.x call."""
    ours: dict[str, Any] = {"type": "tool", "id": "call_2", "name": "swarm_send",
            "state": {"status": "running", "input": {"payload": "hi"}}}  # fmt: skip
    one_x = {"type": "tool", "callID": "call_3", "tool": "swarm_send", "state": ours["state"]}
    messages: list[dict[str, Any]] = [
        {"type": "user", "text": "hi", "content": [ours]},
        {"type": "synthetic", "text": "hi", "content": [ours]},
        {"type": "assistant", "content": [one_x, "junk", {"type": "tool"}]},
        {"type": "assistant", "content": "not a list"},
    ]
    assert opencode_v2_calls(messages) == []


def test_a_2x_session_is_read_through_the_2x_client() -> None:
    """Once the 1.x read finds a 2.x, its newest RECENT_MESSAGES are read by session id."""
    v1, v2 = found_2x(), StubV2(v2_fixture())
    calls = result_of(read(reader_of(v1, v2), SESSION))
    assert v2.asked == [(SESSION, RECENT_MESSAGES)]
    assert [c.call_id for c in calls] == ["call_name_01", "call_send_01"]


def test_a_1x_session_is_never_read_as_a_2x() -> None:
    """A server answering as a 1.x is read as one: the 2.x client is asked nothing."""
    v1, v2 = StubOpencode([]), StubV2(v2_fixture())
    assert result_of(read(reader_of(v1, v2), SESSION)) == []
    assert v2.asked == []


def test_without_a_2x_client_a_2x_session_has_no_transcript() -> None:
    """No 2.x client wired: None, as for a member pigeond reads no transcript of."""
    assert result_of(read(reader_of(found_2x(), None), SESSION)) is None


def test_a_2x_that_fails_to_answer_is_unreadable() -> None:
    """The 2.x client's error (an outage, a refusal) makes the transcript unreadable now."""
    v2 = StubV2(HandOffError("GET /api/session/ses_known/message: HTTP 503", 503,
                             FailureKind.OUTAGE))  # fmt: skip
    failure = failure_of(read(reader_of(found_2x(), v2), SESSION))
    assert failure.check(TranscriptUnreadable)
    assert "HTTP 503" in str(failure.value)


def test_a_2x_read_that_hangs_is_unreadable_at_its_deadline() -> None:
    """A 2.x read that never ends is given up at the reader's deadline."""
    clock = Clock()
    v2 = StubV2([])
    v2.hang = Deferred()
    reading = read(reader_of(found_2x(), v2, clock), SESSION)
    clock.advance(4.9)
    assert not reading.called
    clock.advance(0.2)
    assert failure_of(reading).check(TranscriptUnreadable)


def test_the_daemon_reads_a_2x_session_s_calls_from_its_2x_transcript(
    tmp_path: Path, clock: Clock
) -> None:
    """The daemon's reader, on a server it finds to be a 2.x: the call in the 2.x
    transcript, read from ``/api/session/<id>/message``."""
    standin = OpencodeV2StandIn(mode="2.x")
    standin.transcript.extend(v2_fixture()[1:])
    daemon = build(tmp_path, clock, standin)
    assert daemon.proofs is not None
    calls = result_of(Deferred.fromCoroutine(daemon.proofs.reader.recent_calls(SESSION)))
    assert [c.call_id for c in calls or ()] == ["call_name_01", "call_send_01"]
    assert ("GET", f"/api/session/{SESSION}/message") in standin.api_requests()


def test_the_daemon_asks_a_1x_nothing_under_api(tmp_path: Path, clock: Clock) -> None:
    """On a 1.x, the daemon's reader reads the 1.x transcript, and nothing under /api/."""
    standin = OpencodeV2StandIn(mode="v1")
    daemon = build(tmp_path, clock, standin)
    assert daemon.proofs is not None
    calls = result_of(Deferred.fromCoroutine(daemon.proofs.reader.recent_calls(SESSION)))
    assert calls == []
    assert ("GET", f"/session/{SESSION}/message") in standin.seen
    assert standin.api_requests() == []
