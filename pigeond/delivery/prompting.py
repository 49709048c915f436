"""One hand-off's prompt, naming the target's own agent and model.

opencode runs a prompt that names no agent in its default agent, so the
arbiter asks a :class:`ModeSource` (see :mod:`pigeond.delivery.prompt_mode`) for the
agent and model of the target's latest user message and names them.  An agent
opencode no longer has is not the sender's fault: it is left out, and why is
recorded with the hand-off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from twisted.logger import Logger

from pigeond.delivery.opencode_client import OpencodeError
from pigeond.delivery.prompt_mode import DEFAULT_MODE, PromptMode
from pigeond.model import HandoffMode

log = Logger()


class PromptSender(Protocol):
    async def prompt_async(
        self,
        session_id: str,
        directory: str,
        texts: Sequence[str],
        mode: Mapping[str, Any] | None = None,
    ) -> None: ...


class ModeSource(Protocol):
    async def mode_for(self, session: str, directory: str) -> PromptMode: ...


class AgentChecker(Protocol):
    async def has(self, agent: str, directory: str) -> bool: ...


def handoff_mode(mode: PromptMode, note: str | None) -> HandoffMode:
    return HandoffMode(mode.agent, mode.provider_id, mode.model_id, mode.variant, note)


def describe_mode(mode: HandoffMode) -> str:
    model = f"{mode.provider}/{mode.model}" if mode.provider and mode.model else "default model"
    return f"agent {mode.agent or 'default'}, {model}"


class ModeAwarePrompter:
    """Finds the target's mode (:meth:`mode`) and sends a prompt naming it (:meth:`send`);
    the arbiter checks in between whether it still may send."""

    def __init__(
        self,
        opencode: PromptSender,
        modes: ModeSource | None = None,
        agents: AgentChecker | None = None,
    ) -> None:
        self._opencode = opencode
        self._modes = modes
        self._agents = agents

    async def mode(self, target: str, directory: str) -> tuple[PromptMode, str | None]:
        """The agent and model of the target's latest user message, so a hand-off never
        switches its mode; an agent opencode no longer has is not named."""
        if self._modes is None:
            return DEFAULT_MODE, None
        mode = await self._modes.mode_for(target, directory)
        if mode.agent is None or self._agents is None:
            return mode, None
        if await self._agents.has(mode.agent, directory):
            return mode, None
        note = f"agent {mode.agent!r} no longer exists in opencode; named no agent (its default)"
        log.warn("{target}: {note}", target=target, note=note)
        return mode.without_agent(), note

    async def send(
        self,
        target: str,
        directory: str,
        texts: Sequence[str],
        mode: PromptMode,
        note: str | None,
    ) -> tuple[PromptMode, str | None]:
        """One prompt naming ``mode``; an agent opencode refuses (400) is not the sender's
        fault: the prompt goes again at once naming none."""
        try:
            await self._opencode.prompt_async(target, directory, texts, mode.body_fields())
            return mode, note
        except OpencodeError as e:
            if e.status != 400 or mode.agent is None:
                raise
            note = f"opencode refused agent {mode.agent!r} ({e}); named no agent (its default)"
            log.warn("{target}: {note}", target=target, note=note)
        mode = mode.without_agent()
        await self._opencode.prompt_async(target, directory, texts, mode.body_fields())
        return mode, note
