"""An arbiter with every runtime (opencode in memory, Claude Code, MCP-only members) and
the member doors, over a real repository and a Clock: the seam's tests share it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from pigeond.delivery.arbiter import Arbiter
from pigeond.delivery.claude_runtime import ClaudeRuntime, ClaudeTranscripts, McpRuntime
from pigeond.delivery.member_doors import MemberDoors, TranscriptPaths
from pigeond.delivery.policy import DeliveryPolicy
from pigeond.delivery.pull_slots import PullSlots
from pigeond.delivery.transcript_reads import TranscriptReadWatch
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from testkit.messages import new_message
from tests.arbiter_harness import FakeRegistry, InMemoryOpencode
from tests.http_helpers import result_of

T = TypeVar("T")
CLAUDE = "0b7c7d1e-1f7e-4d8a-9c1b-2a3b4c5d6e7f"
MCP = "mcp_reviewer"
OPENCODE = "ses_target"
TICK_S = 0.5


def at_once(call: Callable[[], T]) -> Deferred[T]:
    """The thread runner of a test: the call, now."""
    return succeed(call())


@dataclass
class Members:
    repo: SwarmRepository
    clock: Clock
    opencode: InMemoryOpencode
    arbiter: Arbiter
    claude: ClaudeRuntime
    doors: MemberDoors
    transcript: Path

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def send(self, to: str, **kwargs: Any) -> str:
        message = new_message(to, **kwargs)
        self.repo.accept(message, self.now_ms())
        return message.msg_id

    def turn_end(self, session: str = CLAUDE) -> Deferred[dict[str, object]]:
        return Deferred.fromCoroutine(self.doors.turn_end(session, str(self.transcript)))

    def wait(self, session: str, wait_s: float = 0) -> Deferred[dict[str, object]]:
        return Deferred.fromCoroutine(self.doors.wait(session, wait_s))

    def event(self, event: str, session: str = CLAUDE) -> None:
        result_of(
            Deferred.fromCoroutine(self.doors.claude_event(session, event, str(self.transcript)))
        )

    def write_transcript(self, *entries: dict[str, Any]) -> None:
        with self.transcript.open("a") as f:
            for entry in entries:
                f.write(json.dumps(entry) + "\n")

    def stored(self, msg_id: str) -> Any:
        stored = self.repo.get(msg_id)
        assert stored is not None
        return stored


def make_members(
    repo: SwarmRepository, clock: Clock, tmp_path: Path, *, batch_max: int = 10
) -> Members:
    db = InlineDatabase(repo)
    slots = PullSlots()
    paths = TranscriptPaths(db, clock)
    claude = ClaudeRuntime(
        slots, ClaudeTranscripts(paths.path_of, at_once, clock, TranscriptReadWatch(clock))
    )
    opencode = InMemoryOpencode()
    policy = DeliveryPolicy(tick_s=TICK_S, batch_max=batch_max, verify_grace_s=60)
    arbiter = Arbiter(
        db, FakeRegistry(), opencode, clock, policy=policy, check_directory=lambda d: None,
        transcripts=opencode, runtimes=[claude, McpRuntime(slots)],
    )  # fmt: skip
    doors = MemberDoors(clock, slots, claude, paths, arbiter)
    transcript = tmp_path / "session.jsonl"
    transcript.write_text("")
    return Members(repo, clock, opencode, arbiter, claude, doors, transcript)
