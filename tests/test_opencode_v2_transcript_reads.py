"""A 2.x transcript read that passes its deadline shows on /health as a 1.x's does
(:mod:`pigeond.delivery.transcript_reads`): opencode ``degraded`` with the reason and
``transcripts_problem``, its message held with no attempt spent, ``ok`` again once a
read answers.  A daemon on a Clock, its 2.x the in-memory stand-in."""

from __future__ import annotations

from pathlib import Path

from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.service.daemon import Daemon
from tests.api_dialect_helpers import build, health, send
from tests.opencode_v2_standin import OpencodeV2StandIn
from tests.storage_helpers import repo_of

DEADLINE_S = 30.0


def stuck_reads(tmp_path: Path, clock: Clock) -> tuple[Daemon, OpencodeV2StandIn]:
    """A daemon whose message to the 2.x was handed off, and whose transcript read of it
    has just passed its deadline."""
    standin = OpencodeV2StandIn(mode="2.x")
    standin.hang_reads = True
    daemon = build(tmp_path, clock, standin, handoff_timeout_s=DEADLINE_S)
    send(daemon, "msg_1")
    clock.advance(1)
    assert health(daemon)["opencode"] == "ok"  # the read is under way
    clock.advance(DEADLINE_S)
    return daemon, standin


def test_a_2x_transcript_read_past_its_deadline_shows_opencode_degraded(
    tmp_path: Path, clock: Clock
) -> None:
    """The 2.x answers its other calls, its transcript read hangs: once the read passes
    handoff_timeout_s, /health says opencode degraded and why; the message waits, handed
    off and not seen."""
    daemon, _ = stuck_reads(tmp_path, clock)
    answer = health(daemon)
    assert answer["opencode"] == "degraded"
    assert answer["opencode_problem"].startswith("transcript reads time out (1 in the last minute)")
    assert "ses_known" in answer["transcripts_problem"]
    stored = repo_of(daemon).get("msg_1")
    assert stored is not None and stored.receipt() == "handed_off"


def test_a_2x_is_ok_again_once_a_transcript_read_answers(tmp_path: Path, clock: Clock) -> None:
    """After the reads answer again, the next read (within verify_interval_s) clears the
    degraded state."""
    daemon, standin = stuck_reads(tmp_path, clock)
    standin.hang_reads = False
    clock.pump([1.0] * (int(Config().verify_interval_s) + 2))
    answer = health(daemon)
    problems = answer.keys() & {"opencode_problem", "transcripts_problem"}
    assert (answer["opencode"], problems) == ("ok", set())
