"""The verifier: finding hand-offs in the target's transcript, or requeuing them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import LogLevel

from pigeond.config import Config
from pigeond.delivery.opencode_client import (
    FailureKind,
    OpencodeError,
    SessionNotFound,
)
from pigeond.delivery.opencode_transcript import envelope_ids
from pigeond.delivery.verifier import CHECKS_AT_ONCE, Verifier
from pigeond.envelope import render_envelope
from pigeond.storage import StorageUnavailable, SwarmRepository
from pigeond.storage.database import InlineDatabase
from testkit.messages import new_message
from tests.http_helpers import result_of
from tests.transcript_sources import opencode_transcripts

pytestmark = pytest.mark.both_backends

GRACE_MS = 60_000


@dataclass
class FakeTranscripts:
    texts: dict[str, list[str]] = field(default_factory=dict)
    reads: list[int | None] = field(default_factory=list)
    error: OpencodeError | None = None

    async def messages(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Each text as one user message, with the mode the person chose."""
        self.reads.append(limit)
        if self.error is not None:
            raise self.error
        return [
            {"info": {"role": "user", "agent": "plan"}, "parts": [{"type": "text", "text": t}]}
            for t in self.texts.get(session_id, [])
        ]


@dataclass
class Setup:
    repo: SwarmRepository
    clock: Clock
    transcripts: FakeTranscripts
    verifier: Verifier
    requeued: list[str]
    transcripts_seen: list[tuple[str, list[dict[str, Any]]]]

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def hand_off(self, msg_id: str, sender: str = "ses_sender") -> str:
        self.repo.accept(new_message(msg_id=msg_id, sender=sender), self.now_ms())
        self.repo.mark_handed_off(msg_id, self.now_ms(), self.now_ms() + GRACE_MS)
        stored = self.repo.get(msg_id)
        assert stored is not None
        return render_envelope(stored)

    def check(self) -> None:
        result_of(Deferred.fromCoroutine(self.verifier.check("ses_target")))


@pytest.fixture
def s(repo: SwarmRepository, clock: Clock) -> Setup:
    transcripts, requeued = FakeTranscripts(), list[str]()
    seen: list[tuple[str, list[dict[str, Any]]]] = []
    verifier = Verifier(
        InlineDatabase(repo), opencode_transcripts(
            transcripts, on_transcript=lambda target, infos: seen.append((target, infos))
        ), clock, Config(verify_interval_s=2, max_requeues=3), on_requeued=requeued.append,
    )  # fmt: skip
    return Setup(repo, clock, transcripts, verifier, requeued, seen)


def state(s: Setup, msg_id: str) -> tuple[str, int | None, int]:
    stored = s.repo.get(msg_id)
    assert stored is not None
    return stored.state, stored.verified_at, stored.requeue_count


def test_envelope_found_is_verified(s: Setup) -> None:
    """A hand-off whose envelope opens a user text part is verified."""
    envelope = s.hand_off("msg_1")
    s.transcripts.texts["ses_target"] = ["hello", envelope]
    s.check()
    assert state(s, "msg_1") == ("handed_off", s.now_ms(), 0)


def test_mention_of_the_id_does_not_count(s: Setup) -> None:
    """A part that merely mentions the msg_id (or quotes the tag later) is not proof."""
    s.hand_off("msg_1")
    s.transcripts.texts["ses_target"] = [
        'see msg_id="msg_1"',
        'text <swarm_message v="1" msg_id="msg_1">',
        '&lt;swarm_message v="1" msg_id="msg_1"&gt;',
    ]
    s.clock.advance(GRACE_MS / 1000)
    s.check()
    assert state(s, "msg_1")[0] == "queued"


def test_checks_recent_messages_first(s: Setup) -> None:
    """Within the grace period only the newest messages of the transcript are read."""
    s.hand_off("msg_1")
    s.check()
    assert s.transcripts.reads == [50]
    assert state(s, "msg_1") == ("handed_off", None, 0)


def test_missing_after_grace_is_requeued(s: Setup) -> None:
    """Still absent after the grace period (the whole transcript read): queued again."""
    s.hand_off("msg_1")
    s.clock.advance(GRACE_MS / 1000)
    s.check()
    assert s.transcripts.reads == [None]
    assert state(s, "msg_1") == ("queued", None, 1)
    stored = s.repo.get("msg_1")
    assert stored is not None and "never reached" in (stored.last_error or "")
    assert s.requeued == ["ses_target"]


def test_fails_after_max_requeues(s: Setup) -> None:
    """The fourth unseen hand-off fails for good, and the sender is told."""
    s.hand_off("msg_1", sender="ses_alice")
    for _ in range(4):
        s.clock.advance(GRACE_MS / 1000)
        s.check()
        if state(s, "msg_1")[0] == "queued":  # the arbiter hands it off again
            s.repo.mark_handed_off("msg_1", s.now_ms(), s.now_ms() + GRACE_MS)
    assert state(s, "msg_1") == ("failed", None, 3)
    [notice] = s.repo.ready_batch("ses_alice", s.now_ms(), 10)
    assert notice.kind == "delivery.failed" and notice.reply_to == "msg_1"


def test_unreadable_transcript_waits(s: Setup) -> None:
    """When the transcript cannot be read (opencode down), nothing is requeued yet."""
    s.hand_off("msg_1")
    s.transcripts.error = OpencodeError("refused", kind=FailureKind.OUTAGE)
    s.clock.advance(GRACE_MS / 1000)
    s.check()
    assert state(s, "msg_1") == ("handed_off", None, 0)


def test_gone_session_counts_as_not_found(s: Setup) -> None:
    """A session that no longer exists cannot hold the message: requeue after grace."""
    s.hand_off("msg_1")
    s.transcripts.error = SessionNotFound("gone")
    s.clock.advance(GRACE_MS / 1000)
    s.check()
    assert state(s, "msg_1")[0] == "queued"


def test_tick_checks_each_target_once_per_interval(s: Setup) -> None:
    """The verifier reads a target's transcript at most once per interval."""
    s.hand_off("msg_1")
    s.verifier.tick()
    s.verifier.tick()
    s.clock.advance(1.9)
    s.verifier.tick()
    assert len(s.transcripts.reads) == 1
    s.clock.advance(0.1)
    s.verifier.tick()
    assert len(s.transcripts.reads) == 2


def test_no_transcript_is_read_while_opencode_is_down(repo: SwarmRepository, clock: Clock) -> None:
    """During an outage of opencode the ticks read nothing; once it answers they do."""
    transcripts, down = FakeTranscripts(), [True]
    verifier = Verifier(
        InlineDatabase(repo), opencode_transcripts(transcripts), clock,
        Config(verify_interval_s=2), opencode_down=lambda: down[0],
    )  # fmt: skip
    now = int(clock.seconds() * 1000)
    repo.accept(new_message(msg_id="msg_1"), now)
    repo.mark_handed_off("msg_1", now, now + GRACE_MS)
    for _ in range(300):
        clock.advance(2)
        verifier.tick()
    assert transcripts.reads == []
    down[0] = False
    verifier.tick()
    assert len(transcripts.reads) == 1


@dataclass
class ParkedTranscripts:
    """Every transcript read waits until the test answers it."""

    reads: list[tuple[str, Deferred[list[dict[str, Any]]]]] = field(default_factory=list)

    async def messages(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        read: Deferred[list[dict[str, Any]]] = Deferred()
        self.reads.append((session_id, read))
        return await read


def test_a_few_transcripts_are_read_at_once_and_every_due_target_is_checked(
    repo: SwarmRepository, clock: Clock
) -> None:
    """Ten targets due in one tick: CHECKS_AT_ONCE reads at a time, the next starting as
    one ends, until all ten were read."""
    transcripts = ParkedTranscripts()
    verifier = Verifier(
        InlineDatabase(repo), opencode_transcripts(transcripts), clock,
        Config(verify_interval_s=2, max_requeues=3),
    )  # fmt: skip
    targets = [f"ses_t{i}" for i in range(10)]
    for i, target in enumerate(targets):
        repo.accept(new_message(target, msg_id=f"msg_{i}"), int(clock.seconds() * 1000))
        now_ms = int(clock.seconds() * 1000)
        repo.mark_handed_off(f"msg_{i}", now_ms, now_ms + GRACE_MS)
    verifier.tick()
    assert len(transcripts.reads) == CHECKS_AT_ONCE
    for answered in range(len(targets)):
        transcripts.reads[answered][1].callback([])
        assert len(transcripts.reads) == min(CHECKS_AT_ONCE + answered + 1, len(targets))
    assert sorted(target for target, _ in transcripts.reads) == sorted(targets)


@pytest.mark.parametrize(
    ("texts", "ids"),
    [
        (['<swarm_message v="1" kind="chat" msg_id="msg_a" priority="normal">\nx'], {"msg_a"}),
        (
            ['<swarm_message v="1" msg_id="msg_a">', '<swarm_message msg_id="msg_b">'],
            {"msg_a", "msg_b"},
        ),
        ([' <swarm_message v="1" msg_id="msg_a">'], set()),
        (['<swarm_message v="1" kind="x">msg_id="msg_a"'], set()),
        (['<swarm_message v="1" xmsg_id="msg_a">'], set()),
    ],
)
def test_envelope_ids(texts: Sequence[str], ids: set[str]) -> None:
    """Only an opening tag at the very start of a part names a delivered msg_id."""
    assert envelope_ids(texts) == ids


def test_a_read_transcript_is_passed_on_for_the_next_hand_offs_mode(s: Setup) -> None:
    """What the verifier reads anyway tells the arbiter the target's latest agent and model."""
    s.transcripts.texts["ses_target"] = [s.hand_off("msg_a")]
    s.check()
    assert s.transcripts_seen == [("ses_target", [{"role": "user", "agent": "plan"}])]


def test_a_check_ending_after_close_writes_nothing(s: Setup) -> None:
    """At shutdown the database closes; a transcript read that ends later records nothing."""
    s.transcripts.texts["ses_target"] = [s.hand_off("msg_a")]
    s.verifier.close()
    s.check()
    assert state(s, "msg_a")[0] == "handed_off"
    stored = s.repo.get("msg_a")
    assert stored is not None and stored.verified_at is None


def test_a_full_disk_while_recording_is_logged_not_raised(
    s: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails (disk full) is an error line; the next check records it."""

    def full(*args: object) -> list[str]:
        raise StorageUnavailable("database or disk is full")

    s.transcripts.texts["ses_target"] = [s.hand_off("msg_a")]
    monkeypatch.setattr(SwarmRepository, "record_look", full)
    s.check()  # does not raise
    monkeypatch.undo()
    s.check()
    stored = s.repo.get("msg_a")
    assert stored is not None and stored.verified_at is not None


def test_a_database_that_keeps_failing_is_told_once_not_every_tick(
    s: Setup, monkeypatch: pytest.MonkeyPatch, log_events: list[tuple[LogLevel, str]]
) -> None:
    """PostgreSQL down (or a locked file) fails every tick's listing: one error line, and
    one again only after the database answered in between."""
    failing = True
    listing = SwarmRepository.verification_targets

    def list_or_fail(repo: SwarmRepository) -> list[str]:
        if failing:
            raise StorageUnavailable("database read failed: connection is bad")
        return listing(repo)

    monkeypatch.setattr(SwarmRepository, "verification_targets", list_or_fail)
    for _ in range(5):
        s.verifier.tick()
    failing = False
    s.verifier.tick()
    failing = True
    s.verifier.tick()
    told = [text for level, text in log_events if "cannot list hand-offs" in text]
    assert len(told) == 2 and all(level == LogLevel.error for level, t in log_events if t in told)
