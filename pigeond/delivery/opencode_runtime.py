"""opencode 1.x on the delivery seam: pushed with ``prompt_async``, one turn at a time.

Before a hand-off the session's directory is looked up (:mod:`pigeond.delivery.registry`)
and checked, its running turn waited out (:mod:`pigeond.delivery.turns`) and its agent
and model asked for (:mod:`pigeond.delivery.prompting`); after it, the turn the prompt
started is waited for, so the next prompt never lands in a running turn.  Its transcript
is ``GET /session/<id>/message``, read by :class:`OpencodeTranscripts`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pigeond.costs import EndedTurn
from pigeond.delivery.answers import Steps, answers_in, steps_of
from pigeond.delivery.failures import FailureKind
from pigeond.delivery.metrics import DeliveryMetrics
from pigeond.delivery.opencode_client import OpencodeError, SessionNotFound
from pigeond.delivery.opencode_transcript import TranscriptReader, envelope_homes
from pigeond.delivery.opencode_usage import ended_turns
from pigeond.delivery.prompt_mode import PromptMode
from pigeond.delivery.prompting import ModeAwarePrompter, handoff_mode
from pigeond.delivery.registry import DirectoryResolver
from pigeond.delivery.runtime import Delivery, Prepared, TranscriptSource
from pigeond.delivery.turns import TURN_ENDED, TurnMark, TurnTracker
from pigeond.model import HandoffMode, Runtime

log = Logger(namespace="pigeond.delivery.arbiter")  # one story in the logs with the arbiter's


@dataclass(slots=True)
class _Prompt:
    """One hand-off to opencode: where, naming which mode, and the turn it started."""

    directory: str
    mode: PromptMode
    note: str | None
    mark: TurnMark | None = None


class OpencodeRuntime:
    name: Runtime = Runtime.OPENCODE
    steers: bool = False

    def __init__(
        self,
        registry: DirectoryResolver,
        prompter: ModeAwarePrompter,
        clock: IReactorTime,
        metrics: DeliveryMetrics,
        *,
        turns: TurnTracker | None = None,
        check_directory: Callable[[str], str | None],
        transcripts: OpencodeTranscripts | None = None,
    ) -> None:
        """``turns`` None: ``immediate`` delivery (no turn is waited for)."""
        self._registry = registry
        self._prompter = prompter
        self._clock = clock
        self._metrics = metrics
        self._turns = turns
        self._check_directory = check_directory
        self.transcripts: TranscriptSource | None = transcripts
        self._turn_waits: set[Deferred[str]] = set()

    def may_take_now(self, target: str) -> bool:
        return True  # pushed: whether it is idle is waited for in prepare

    async def prepare(self, target: str) -> Prepared | None:
        directory = await self._registry.resolve(target)
        problem = self._check_directory(directory)
        if problem is not None:
            raise OpencodeError(problem, kind=FailureKind.OUTAGE)
        waited = False
        if self._turns is not None:
            waited_from = self._clock.seconds()
            known_idle = self._turns.known_idle(target)
            why = await self._turns.wait_until_idle(target, directory)
            self._metrics.turn_wait.observe(self._clock.seconds() - waited_from)
            if why != "idle":
                log.warn("{target}: {why}", target=target, why=why)
            waited = not known_idle
        mode, note = await self._prompter.mode(target, directory)
        return Prepared(waited, _Prompt(directory, mode, note))

    async def hand_off(
        self,
        target: str,
        prepared: Prepared,
        texts: Sequence[str],
        *,
        delivery: Delivery = Delivery.QUEUE,  # never steers: every batch after the turn
    ) -> HandoffMode:
        prompt = prepared.detail
        assert isinstance(prompt, _Prompt)
        prompt.mark = self._turns.mark(target) if self._turns is not None else None
        mode, note = await self._prompter.send(
            target, prompt.directory, texts, prompt.mode, prompt.note
        )
        return handoff_mode(mode, note)

    async def after_hand_off(self, target: str, prepared: Prepared) -> None:
        prompt = prepared.detail
        assert isinstance(prompt, _Prompt)
        if self._turns is None or prompt.mark is None:
            return
        wait = Deferred.fromCoroutine(
            self._turns.wait_turn_end(target, prompt.directory, prompt.mark)
        )
        self._turn_waits.add(wait)
        try:
            why = await wait
        except CancelledError:
            return
        finally:
            self._turn_waits.discard(wait)
        # the usual end is a debug line (one per hand-off, the hand-off's own line says
        # enough); a wait cut short by a timeout explains a delay: info
        level = log.debug if why == TURN_ENDED else log.info
        level("{target}: {why}", target=target, why=why)

    def drain_ended(self, target: str) -> None:
        return None  # nobody waits for a push's drain

    def stop(self) -> None:
        for wait in list(self._turn_waits):
            wait.cancel()


@dataclass(frozen=True, slots=True)
class OpencodeTranscript:
    """Messages of ``GET /session/<id>/message``, newest ``limit`` (all: ``complete``);
    their turns indexed once, for both the turns and the answers a look asks of them."""

    messages: list[dict[str, Any]]
    complete: bool
    steps: Steps = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", steps_of(self.messages))

    @property
    def homes(self) -> Mapping[str, str | None]:
        return envelope_homes(self.messages)

    def answers(self, where: Mapping[str, str]) -> dict[str, str]:
        return answers_in(self.messages, dict(where), self.steps)

    def turns(self, where: Mapping[str, str]) -> list[EndedTurn]:
        return ended_turns(self.messages, where, complete=self.complete, index=self.steps)


class OpencodeTranscripts:
    """A session's transcript, read from opencode in the session's own directory."""

    def __init__(
        self,
        registry: DirectoryResolver,
        client: TranscriptReader,
        *,
        on_transcript: Callable[[str, list[dict[str, Any]]], None] = lambda target, infos: None,
    ) -> None:
        """``on_transcript`` is told the messages' ``info`` of every read (the agent and
        model of the session's latest turn, for the next hand-off)."""
        self._registry = registry
        self._client = client
        self._on_transcript = on_transcript

    async def read(self, target: str, limit: int | None) -> OpencodeTranscript:
        try:
            directory = await self._registry.resolve(target)
            messages = await self._client.messages(target, directory, limit)
        except SessionNotFound:
            return OpencodeTranscript([], True)
        self._on_transcript(target, [m["info"] for m in messages if "info" in m])
        return OpencodeTranscript(messages, limit is None or len(messages) < limit)
