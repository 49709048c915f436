"""Which agent and model a hand-off names: the ones the target's latest user message used.

opencode runs a prompt that names no agent in its default agent (``build``)
on its default model.  A swarm message must not move a read-only planning
session into an agent that edits files and runs commands, so every hand-off
names the agent, model and variant of the target's **latest** user message:
the mode its person, or its own last prompt, chose.

What is known costs nothing extra: pigeond already reads transcripts to
verify hand-offs, and opencode's event stream carries every user message's
``info``; :class:`ModeTracker` keeps the newest per target from both, and
reads the newest messages of a transcript only when nothing is known (or the
event stream, which would tell of a switch, is down).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from twisted.internet.interfaces import IReactorTime

from pigeond.delivery.opencode_client import OpencodeError

# opencode's names are short identifiers; anything else in a transcript is ignored
_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@/+-]{0,127}$")


@dataclass(frozen=True, slots=True)
class PromptMode:
    """The agent and model a prompt names; None fields are left to opencode's defaults."""

    agent: str | None = None
    provider_id: str | None = None
    model_id: str | None = None
    variant: str | None = None

    @property
    def model(self) -> str | None:
        if self.provider_id is None or self.model_id is None:
            return None
        return f"{self.provider_id}/{self.model_id}"

    def body_fields(self) -> dict[str, Any]:
        """The ``prompt_async`` body fields that name this mode."""
        fields: dict[str, Any] = {}
        if self.agent is not None:
            fields["agent"] = self.agent
        if self.provider_id is not None and self.model_id is not None:
            fields["model"] = {"providerID": self.provider_id, "modelID": self.model_id}
            if self.variant is not None:
                fields["variant"] = self.variant
        return fields

    def without_agent(self) -> PromptMode:
        return PromptMode(None, self.provider_id, self.model_id, self.variant)

    def describe(self) -> str:
        agent = self.agent or "opencode's default agent"
        model = self.model or "its default model"
        variant = f" ({self.variant})" if self.variant and self.model else ""
        return f"{agent}, {model}{variant}"


DEFAULT_MODE: Final = PromptMode()


def _name(value: object) -> str | None:
    return value if isinstance(value, str) and _NAME_RE.fullmatch(value) else None


def mode_of_user_message(info: object) -> PromptMode | None:
    """The mode a user message's ``info`` records, or None for anything else.

    opencode 1.15 and 1.18 both store ``{"role": "user", "agent": "plan",
    "model": {"providerID": "p", "modelID": "m"}}``; a variant, where there is
    one, is ``info.variant`` or ``info.model.variant``.
    """
    if not isinstance(info, Mapping) or info.get("role") != "user":
        return None
    agent = _name(info.get("agent"))
    model = info.get("model")
    provider = model_id = variant = None
    if isinstance(model, Mapping):
        provider, model_id = _name(model.get("providerID")), _name(model.get("modelID"))
        variant = _name(model.get("variant")) or _name(info.get("variant"))
    if provider is None or model_id is None:
        provider = model_id = variant = None
    if agent is None and provider is None:
        return None
    return PromptMode(agent, provider, model_id, variant)


def latest_mode(infos: Sequence[object]) -> PromptMode | None:
    """The mode of the newest user message among ``infos`` (oldest first)."""
    for info in reversed(infos):
        mode = mode_of_user_message(info)
        if mode is not None:
            return mode
    return None


class MessageInfoReader(Protocol):
    async def message_infos(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]: ...


NEWEST_READ: Final = 20


class ModeTracker:
    """The newest known mode per target; fed by transcripts and events, read on demand."""

    def __init__(
        self, reader: MessageInfoReader, *, stream_connected: Callable[[], bool] = lambda: False
    ) -> None:
        self._reader = reader
        self._stream_connected = stream_connected
        self._modes: dict[str, tuple[str, PromptMode]] = {}

    def observe(self, session: str, info: object) -> None:
        """A user message seen in a transcript or an event.  opencode's message ids
        ascend with time, so an older message read late never replaces a newer one."""
        mode = mode_of_user_message(info)
        if mode is None or not isinstance(info, Mapping):
            return
        message_id = info.get("id")
        message_id = message_id if isinstance(message_id, str) else ""
        held = self._modes.get(session)
        if held is None or message_id >= held[0]:
            self._modes[session] = (message_id, mode)

    def observe_transcript(self, session: str, infos: Sequence[object]) -> None:
        """A transcript (or its newest part), oldest first."""
        for info in reversed(infos):
            if mode_of_user_message(info) is not None:
                self.observe(session, info)
                return

    def known(self, session: str) -> PromptMode | None:
        held = self._modes.get(session)
        return None if held is None else held[1]

    async def mode_for(self, session: str, directory: str) -> PromptMode:
        """The mode to name in a hand-off: the known one while the event stream would have
        told of a change, else the newest user message read now; opencode's defaults for a
        session with no user message yet."""
        known = self.known(session)
        if known is not None and self._stream_connected():
            return known
        infos = await self._reader.message_infos(session, directory, NEWEST_READ)
        if latest_mode(infos) is None and len(infos) >= NEWEST_READ:
            infos = await self._reader.message_infos(session, directory)
        self.observe_transcript(session, infos)
        return self.known(session) or DEFAULT_MODE


class AgentLister(Protocol):
    async def agent_names(self, directory: str) -> set[str]: ...


class AgentCatalog:
    """Which agents opencode has, per directory (``GET /agent``), cached for ``ttl_s``.

    opencode 1.15 and 1.18 answer 204 to a prompt naming an agent they do not
    have and then drop it, so the name is checked before it is used.  When the
    list cannot be read the agent is taken to exist: a 400 still falls back.
    """

    def __init__(self, lister: AgentLister, clock: IReactorTime, ttl_s: float = 60.0) -> None:
        self._lister = lister
        self._clock = clock
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, set[str]]] = {}

    async def has(self, agent: str, directory: str) -> bool:
        now = self._clock.seconds()
        cached = self._cache.get(directory)
        if cached is None or now - cached[0] > self.ttl_s or agent not in cached[1]:
            try:
                names = await self._lister.agent_names(directory)
            except OpencodeError:
                return True
            self._cache[directory] = (now, names)
            cached = (now, names)
        return agent in cached[1]
