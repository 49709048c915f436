"""The arbiter on a fake clock, with an in-memory opencode whose answers the test controls.

:func:`make_harness` builds an :class:`Arbiter` over a real repository, an
:class:`InMemoryOpencode` that parks every prompt until the test fires it, and a
:class:`FakeRegistry` of session directories.  The in-memory opencode also has
transcripts, filled only when the test says a prompt reached one (:meth:`take`);
:func:`restarted` is the same database, clock and opencode under a new arbiter, as after
a ``kill -9`` and a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.delivery.arbiter import AgentChecker, Arbiter, DeliveryPolicy, ModeSource
from pigeond.delivery.drain import TargetLocks
from pigeond.delivery.opencode_client import OpencodeError, SessionNotFound
from pigeond.delivery.prompt_mode import PromptMode
from pigeond.delivery.turns import TurnTracker
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from testkit.messages import new_message
from tests.fixed_time import now_ms

TICK_S = 0.5
OUTAGE_S = 30.0


@dataclass
class Prompt:
    target: str
    directory: str
    texts: list[str]
    answer: Deferred[None]
    mode: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n".join(self.texts)

    def msg_ids(self) -> list[str]:
        return [t.split('msg_id="')[1].split('"')[0] for t in self.texts]


@dataclass
class InMemoryOpencode:
    """prompt_async parks on a Deferred per call; the test fires it."""

    prompts: list[Prompt] = field(default_factory=list)
    in_flight: dict[str, int] = field(default_factory=dict)
    most_in_flight: dict[str, int] = field(default_factory=dict)
    # each session's user messages, one list of text parts per prompt that reached it
    transcripts: dict[str, list[list[str]]] = field(default_factory=dict)
    transcript_error: OpencodeError | None = None  # raised by every transcript read
    transcript_reads: list[tuple[str, int | None]] = field(default_factory=list)

    async def prompt_async(
        self,
        session_id: str,
        directory: str,
        texts: Sequence[str],
        mode: Mapping[str, Any] | None = None,
    ) -> None:
        prompt = Prompt(session_id, directory, list(texts), Deferred(), dict(mode or {}))
        self.prompts.append(prompt)
        self.in_flight[session_id] = self.in_flight.get(session_id, 0) + 1
        self.most_in_flight[session_id] = max(
            self.most_in_flight.get(session_id, 0), self.in_flight[session_id]
        )
        try:
            await prompt.answer
        finally:
            self.in_flight[session_id] -= 1

    def take(self, prompt: Prompt) -> None:
        """The prompt reached its target's transcript (opencode took it)."""
        self.transcripts.setdefault(prompt.target, []).append(list(prompt.texts))

    async def messages(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """``GET /session/<id>/message``: the user messages :meth:`take` put there."""
        self.transcript_reads.append((session_id, limit))
        if self.transcript_error is not None:
            raise self.transcript_error
        messages = [
            {"info": {"role": "user", "id": f"msg{n:04d}"},
             "parts": [{"type": "text", "text": text} for text in texts]}
            for n, texts in enumerate(self.transcripts.get(session_id, []))
        ]  # fmt: skip
        return messages if limit is None else messages[-limit:]

    def pending(self) -> list[Prompt]:
        return [p for p in self.prompts if not p.answer.called]

    def succeed_all(self) -> None:
        for prompt in self.pending():
            prompt.answer.callback(None)

    def fail_all(self, error: Exception) -> None:
        for prompt in self.pending():
            prompt.answer.errback(error)


@dataclass
class FakeRegistry:
    directories: dict[str, str] = field(default_factory=dict)
    invalidated: list[str] = field(default_factory=list)
    gone: set[str] = field(default_factory=set)

    async def resolve(self, session_id: str) -> str:
        if session_id in self.gone:
            raise SessionNotFound(f"GET /session/{session_id}: session not found")
        return self.directories.get(session_id, f"/work/{session_id}")

    def invalidate(self, session_id: str) -> None:
        self.invalidated.append(session_id)


@dataclass
class Harness:
    repo: SwarmRepository
    clock: Clock
    opencode: InMemoryOpencode
    registry: FakeRegistry
    arbiter: Arbiter
    turns: TurnTracker | None = None

    def now_ms(self) -> int:
        return now_ms(self.clock)

    def send(self, to: str = "ses_target", expires_at: int | None = None, **kwargs: Any) -> str:
        message = new_message(to, **kwargs)
        self.repo.accept(message, self.now_ms(), expires_at)
        return message.msg_id

    def prompts_to(self, target: str) -> list[Prompt]:
        return [p for p in self.opencode.prompts if p.target == target]

    def state(self, msg_id: str) -> str:
        stored = self.repo.get(msg_id)
        assert stored is not None
        return stored.state


class SlowModes:
    """A mode lookup that waits until the test answers it."""

    def __init__(self) -> None:
        self.waiting: list[Deferred[PromptMode]] = []

    async def mode_for(self, session: str, directory: str) -> PromptMode:
        answer: Deferred[PromptMode] = Deferred()
        self.waiting.append(answer)
        return await answer


def make_harness(
    repo: SwarmRepository,
    clock: Clock,
    *,
    batch_max: int = 1,
    turns: TurnTracker | None = None,
    missing_dirs: frozenset[str] = frozenset(),
    modes: ModeSource | None = None,
    agents: AgentChecker | None = None,
    transcripts: bool = False,
    opencode: InMemoryOpencode | None = None,
    target_locks: TargetLocks | None = None,
    opencode_down: Callable[[], bool] = lambda: False,
) -> Harness:
    """``transcripts``: the arbiter reads the in-memory opencode's transcripts (to end a
    doubt, see pigeond/delivery/recovery.py); ``opencode``: an existing one (a restart);
    ``opencode_down``: whether an outage of opencode is under way (reachability's view)."""
    opencode, registry = opencode or InMemoryOpencode(), FakeRegistry()
    policy = DeliveryPolicy(tick_s=TICK_S, max_attempts=10, batch_max=batch_max,
                            outage_retry_s=OUTAGE_S, verify_grace_s=60)  # fmt: skip
    arbiter = Arbiter(
        InlineDatabase(repo), registry, opencode, clock, policy=policy, turns=turns,
        check_directory=lambda d: f"{d} does not exist" if d in missing_dirs else None,
        modes=modes, agents=agents, transcripts=opencode if transcripts else None,
        target_locks=target_locks, opencode_down=opencode_down,
    )  # fmt: skip
    return Harness(repo, clock, opencode, registry, arbiter, turns)


def restarted(
    h: Harness,
    *,
    batch_max: int = 1,
    turns: TurnTracker | None = None,
    opencode_down: Callable[[], bool] = lambda: False,
) -> Harness:
    """A new arbiter on the same database, clock and opencode: pigeond after a ``kill -9``
    (the old arbiter is dropped as it was, its prompts left unanswered) and a restart."""
    return make_harness(
        h.repo, h.clock, batch_max=batch_max, turns=turns, transcripts=True,
        opencode=h.opencode, opencode_down=opencode_down,
    )  # fmt: skip
