"""A transcript read that hangs past its deadline shows on /health (issue 27, measurement
7): opencode ``degraded`` with the reason, its messages held without an attempt spent, and
``ok`` again once a read succeeds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.web import server
from twisted.web.resource import Resource

from pigeond.config import Config
from pigeond.delivery.claude_runtime import ClaudeTranscripts
from pigeond.delivery.failures import FailureKind, HandOffError
from pigeond.delivery.transcript_reads import FORGET_S, TranscriptReadWatch
from pigeond.service.daemon import Daemon
from tests.http_helpers import daemon_call, failure_of, result_of
from tests.storage_helpers import clock_daemon, repo_of

URL = "http://127.0.0.1:4096"
DEADLINE_S = 30.0
CLAUDE = "cc_0b7f3c52-6a4e-4f55-a1f1-3b1c0c1a7d10"


class SlowTranscripts(Resource):
    """opencode with one session, whose transcript reads hang while ``hang_reads``."""

    isLeaf = True

    def __init__(self, directory: Path) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.directory = str(directory)
        self.hang_reads = True
        self.held: list[server.Request] = []

    def render(self, request: server.Request) -> bytes | int:
        path = (request.path or b"").decode()
        request.setHeader(b"content-type", b"application/json")
        if path.endswith("/message"):
            if self.hang_reads:
                self.held.append(request)
                return server.NOT_DONE_YET
            return b"[]"
        if path.endswith("/prompt_async"):
            request.setResponseCode(204)
            return b""
        if path.startswith("/session/") and path.count("/") == 2 and path != "/session/status":
            return json.dumps({"id": path[9:], "directory": self.directory}).encode()
        return b"[]" if path == "/agent" else b"{}"


def build(tmp_path: Path, clock: Clock, opencode: Resource) -> Daemon:
    config = Config(
        db=str(tmp_path / "p.db"), delivery="call", opencode_url=URL,
        handoff_timeout_s=DEADLINE_S,
    )  # fmt: skip
    return clock_daemon(config, clock, http=StubTreq(opencode))  # type: ignore[arg-type]


def health(daemon: Daemon) -> dict[str, Any]:
    status, body = daemon_call(daemon, "GET", "/health")
    assert status == 200
    return dict(body)


def test_a_transcript_read_past_its_deadline_shows_opencode_degraded(
    tmp_path: Path, clock: Clock
) -> None:
    """opencode answers its other calls, a transcript read hangs: once the read passes
    handoff_timeout_s, /health says opencode degraded and why; the message waits queued
    with no attempt spent."""
    opencode = SlowTranscripts(tmp_path)
    daemon = build(tmp_path, clock, opencode)
    daemon.start_delivery()
    body = {"from": "ses_a", "to": "ses_t", "payload": "hi", "msg_id": "msg_1"}
    status, _ = daemon_call(daemon, "POST", "/swarm/send", body)
    assert status == 202
    assert opencode.held and health(daemon)["opencode"] == "ok"
    clock.advance(DEADLINE_S)
    answer = health(daemon)
    assert answer["opencode"] == "degraded"
    assert answer["opencode_problem"].startswith("transcript reads time out (1 in the last minute)")
    assert "ses_t" in answer["transcripts_problem"]
    stored = repo_of(daemon).get("msg_1")
    assert stored is not None and (stored.state, stored.attempts) == ("queued", 0)


def test_opencode_is_ok_again_once_a_transcript_read_succeeds(tmp_path: Path, clock: Clock) -> None:
    """After the reads answer again, the next read clears the degraded state."""
    opencode = SlowTranscripts(tmp_path)
    daemon = build(tmp_path, clock, opencode)
    daemon.start_delivery()
    daemon_call(daemon, "POST", "/swarm/send", {"from": "ses_a", "to": "ses_t", "payload": "hi"})
    clock.advance(DEADLINE_S)
    assert health(daemon)["opencode"] == "degraded"
    opencode.hang_reads = False
    for _ in range(int(Config().outage_retry_s) + 2):
        clock.advance(1)
    answer = health(daemon)
    assert answer["opencode"] == "ok"
    assert "opencode_problem" not in answer and "transcripts_problem" not in answer


def test_the_watch_counts_the_timeouts_of_the_last_minute(clock: Clock) -> None:
    """The reason says how many reads timed out in the last minute, and names the target."""
    watch = TranscriptReadWatch(clock)
    for _ in range(3):
        watch.timed_out("ses_t", "GET /session/ses_t/message: no complete answer within 30 s")
        clock.advance(10)
    problem = watch.problem()
    assert problem is not None and problem.startswith(
        "transcript reads time out (3 in the last minute): ses_t, latest: GET /session/ses_t"
    )
    clock.advance(60)
    assert (watch.problem() or "").startswith("transcript reads time out (0 in the last minute)")


def test_a_target_nothing_reads_any_more_is_forgotten(clock: Clock) -> None:
    """A timed-out target that is never read again stops degrading /health after FORGET_S."""
    watch = TranscriptReadWatch(clock)
    watch.timed_out("ses_t", "timed out")
    clock.advance(FORGET_S - 1)
    assert watch.problem() is not None
    clock.advance(1)
    assert watch.problem() is None


def test_a_success_clears_only_its_own_target(clock: Clock) -> None:
    """One target read again does not hide another whose reads still time out."""
    watch = TranscriptReadWatch(clock)
    watch.timed_out("ses_a", "timed out")
    watch.timed_out("ses_b", "timed out")
    watch.succeeded("ses_a")
    assert "ses_b" in (watch.problem() or "")
    watch.succeeded("ses_b")
    assert watch.problem() is None


@pytest.fixture
def stuck_file_reads(clock: Clock) -> tuple[ClaudeTranscripts, TranscriptReadWatch, list[Any]]:
    """A Claude Code transcript reader whose reads in a thread return only when the test
    fires them (each is a Deferred in the list)."""
    reads: list[Deferred[Any]] = []

    def in_thread(call: Any) -> Deferred[Any]:
        reads.append(Deferred())
        return reads[-1]

    def path_of(target: str) -> Deferred[str | None]:
        d: Deferred[str | None] = Deferred()
        d.callback("/nfs/hung/session.jsonl")
        return d

    watch = TranscriptReadWatch(clock)
    return ClaudeTranscripts(path_of, in_thread, clock, watch), watch, reads


def test_a_claude_code_transcript_file_read_has_a_deadline(
    clock: Clock, stuck_file_reads: tuple[ClaudeTranscripts, TranscriptReadWatch, list[Any]]
) -> None:
    """A file read that does not return (a hung mount) fails as an outage at the deadline,
    and is told to the watch."""
    transcripts, watch, _ = stuck_file_reads
    read = Deferred.fromCoroutine(transcripts.read(CLAUDE, None))
    clock.advance(watch.deadline_s)
    error = failure_of(read).value
    assert isinstance(error, HandOffError) and error.kind is FailureKind.OUTAGE
    assert CLAUDE in (watch.problem() or "")


def test_no_second_file_read_of_a_target_while_one_is_stuck(
    clock: Clock, stuck_file_reads: tuple[ClaudeTranscripts, TranscriptReadWatch, list[Any]]
) -> None:
    """While a read of a target still runs in its thread, the next read of it starts no
    thread of its own (it times out too); once the thread returns, reads go on and the
    watch clears."""
    transcripts, watch, reads = stuck_file_reads
    first = Deferred.fromCoroutine(transcripts.read(CLAUDE, None))
    clock.advance(watch.deadline_s)
    failure_of(first)
    second = Deferred.fromCoroutine(transcripts.read(CLAUDE, None))
    clock.advance(watch.deadline_s)
    failure_of(second)
    assert len(reads) == 1
    reads[0].callback(([], True))
    third = Deferred.fromCoroutine(transcripts.read(CLAUDE, None))
    reads[1].callback(([], True))
    assert result_of(third).complete is True
    assert watch.problem() is None
