"""When a person last prompted a session: the hop brake's reset, read from transcripts.

pigeond reads opencode's transcripts anyway (pigeond/delivery/verifier.py); a person's own
prompt is a user message with words of its own: at least one non-synthetic text part,
and none that begins with a swarm envelope's opening tag (what pigeond hands off; a
payload is escaped and can never begin a part with a tag).  Read only when the hop brake
would hold a send (pigeond/brakes/hops.py), and only the newest messages: a prompt older
than those is older than the thread's last reset in practice.

Claude Code's sessions are read the same way, in the transcript file their hooks named
(pigeond/delivery/claude_transcript.py ``person_prompt_at``: a user entry with text of its
own that Claude Code did not write itself).  MCP-only members have no transcript: unknown
(None).  So is a session opencode does not have, a session of an opencode 2.x (its
transcript's prompts are not read), or a transcript that cannot be read now: the hold
then stands, and a person can release it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.logger import Logger

from pigeond.delivery.claude_runtime import ClaudeTranscript
from pigeond.delivery.claude_transcript import person_prompt_at as claude_prompt_at
from pigeond.delivery.failures import HandOffError
from pigeond.delivery.opencode_client import SessionNotFound, SpeaksV2, user_texts_of
from pigeond.delivery.opencode_transcript import TranscriptReader, envelope_ids
from pigeond.delivery.registry import DirectoryResolver
from pigeond.delivery.runtime import TranscriptSource
from pigeond.model import Runtime, runtime_of

log = Logger()
# How many of a session's newest messages are read for a person's prompt.
RECENT_MESSAGES = 50


def person_prompt_at(message: Mapping[str, Any]) -> int | None:
    """When ``message`` (one entry of ``GET /session/<id>/message``) was created, if it is a
    person's own prompt; None if it is anything else."""
    texts = user_texts_of([message])
    if not texts or envelope_ids(texts):
        return None
    created = message.get("info", {}).get("time", {}).get("created")
    if isinstance(created, bool) or not isinstance(created, int | float):
        return None
    return int(created)


def newest_person_prompt(messages: list[dict[str, Any]]) -> int | None:
    """The creation time of the newest person's prompt among ``messages``; None if none."""
    times = [t for t in map(person_prompt_at, messages) if t is not None]
    return max(times, default=None)


class OpencodePersonPrompts:
    """:class:`pigeond.brakes.PersonPrompts` for opencode's sessions."""

    def __init__(self, registry: DirectoryResolver, client: TranscriptReader) -> None:
        self._registry = registry
        self._client = client

    async def last_person_prompt(self, session: str) -> int | None:
        try:
            directory = await self._registry.resolve(session)
            messages = await self._client.messages(session, directory, RECENT_MESSAGES)
        except (SessionNotFound, SpeaksV2):
            return None  # no such session, or a 2.x's (whose prompts are not read)
        except HandOffError as e:
            log.info("cannot read {session}'s transcript for a person's prompt: {error}",
                     session=session, error=str(e))  # fmt: skip
            return None
        return newest_person_prompt(messages)


class ClaudePersonPrompts:
    """:class:`pigeond.brakes.PersonPrompts` for Claude Code's sessions, in the transcript
    files their hooks named (``transcripts``: the Claude Code runtime's)."""

    def __init__(self, transcripts: TranscriptSource) -> None:
        self._transcripts = transcripts

    async def last_person_prompt(self, session: str) -> int | None:
        try:
            view = await self._transcripts.read(session, RECENT_MESSAGES)
        except HandOffError as e:
            log.info("cannot read {session}'s transcript for a person's prompt: {error}",
                     session=session, error=str(e))  # fmt: skip
            return None
        if not isinstance(view, ClaudeTranscript):
            return None
        times = [t for t in map(claude_prompt_at, view.entries) if t is not None]
        return max(times, default=None)


class PersonPromptsByRuntime:
    """Each session asked where its runtime keeps its transcript (None: unknown)."""

    def __init__(
        self,
        opencode: OpencodePersonPrompts | None = None,
        claude: ClaudePersonPrompts | None = None,
    ) -> None:
        self._by_runtime = {Runtime.OPENCODE: opencode, Runtime.CLAUDE: claude}

    async def last_person_prompt(self, session: str) -> int | None:
        try:
            reader = self._by_runtime.get(runtime_of(session))
        except ValueError:
            return None
        return None if reader is None else await reader.last_person_prompt(session)
