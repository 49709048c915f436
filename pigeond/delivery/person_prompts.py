"""When a person last prompted a session: the hop brake's reset, read from transcripts.

pigeond reads opencode's transcripts anyway (pigeond/delivery/verifier.py); a person's own
prompt is a user message with words of its own: at least one non-synthetic text part,
and none that begins with a swarm envelope's opening tag (what pigeond hands off; a
payload is escaped and can never begin a part with a tag).  Read only when the hop brake
would hold a send (pigeond/brakes/hops.py), and only the newest messages: a prompt older
than those is older than the thread's last reset in practice.

Claude Code's sessions are read the same way, in the transcript file their hooks named
(pigeond/delivery/claude_transcript.py ``person_prompt_at``: a user entry with text of its
own that Claude Code did not write itself).  A session of an opencode 2.x is read in its
2.x transcript once the 1.x read finds the server to be one (as the delivery's reads
switch, :mod:`pigeond.delivery.opencode_dialect`): a person's prompt there is a ``user``
input with words, none of whose lines begins with a swarm envelope's opening tag (what
pigeond admits, as ``synthetic`` input or, on a server without that route, as a
``user`` prompt; the rule the 2.x transcript finds pigeond's envelopes by);
``synthetic`` input is never a person's.  MCP-only members have no transcript: unknown
(None).  So is a session opencode does not have, or a transcript that cannot be read
now: the hold then stands, and a person can release it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.logger import Logger

from pigeond.delivery.claude_runtime import ClaudeTranscript
from pigeond.delivery.claude_transcript import person_prompt_at as claude_prompt_at
from pigeond.delivery.failures import HandOffError
from pigeond.delivery.opencode_client import SessionNotFound, SpeaksV2
from pigeond.delivery.opencode_transcript import TranscriptReader, envelope_ids, user_texts_of
from pigeond.delivery.opencode_v2_tool_calls import V2Messages
from pigeond.delivery.opencode_v2_transcript import ENVELOPE_AT_LINE_START
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
    info = message.get("info")
    return _millis(info.get("time") if isinstance(info, dict) else None)


def v2_person_prompt_at(message: Mapping[str, Any]) -> int | None:
    """When ``message`` (one entry of a 2.x's ``GET /api/session/{id}/message``) was
    created, if it is a person's own prompt; None if it is anything else."""
    text = message.get("text")
    if message.get("type") != "user" or not isinstance(text, str) or not text.strip():
        return None
    if ENVELOPE_AT_LINE_START.search(text):
        return None  # pigeond's own input
    return _millis(message.get("time"))


def _millis(time: object) -> int | None:
    created = time.get("created") if isinstance(time, dict) else None
    if isinstance(created, bool) or not isinstance(created, int | float):
        return None
    return int(created)


def newest_person_prompt(messages: list[dict[str, Any]], v2: bool = False) -> int | None:
    """The creation time of the newest person's prompt among ``messages`` (a 1.x's, or a
    2.x's with ``v2``); None if none."""
    at = v2_person_prompt_at if v2 else person_prompt_at
    times = [t for t in map(at, messages) if t is not None]
    return max(times, default=None)


class OpencodePersonPrompts:
    """:class:`pigeond.brakes.PersonPrompts` for opencode's sessions (``v2``: the 2.x
    client on the same URL, read once the server is found to be a 2.x)."""

    def __init__(
        self, registry: DirectoryResolver, client: TranscriptReader, v2: V2Messages | None = None
    ) -> None:
        self._registry = registry
        self._client = client
        self._v2 = v2

    async def last_person_prompt(self, session: str) -> int | None:
        try:
            directory = await self._registry.resolve(session)
            messages = await self._client.messages(session, directory, RECENT_MESSAGES)
        except SessionNotFound:
            return None
        except SpeaksV2:  # the 1.x client asks a 2.x nothing: read it as a 2.x
            return None if self._v2 is None else await self._last_v2_prompt(self._v2, session)
        except HandOffError as e:
            _unreadable(session, e)
            return None
        return newest_person_prompt(messages)

    @staticmethod
    async def _last_v2_prompt(client: V2Messages, session: str) -> int | None:
        try:
            messages = await client.messages(session, RECENT_MESSAGES)  # a session it lacks: []
        except HandOffError as e:
            _unreadable(session, e)
            return None
        return newest_person_prompt(messages, v2=True)


def _unreadable(session: str, error: HandOffError) -> None:
    log.info("cannot read {session}'s transcript for a person's prompt: {error}",
             session=session, error=str(error))  # fmt: skip


class ClaudePersonPrompts:
    """:class:`pigeond.brakes.PersonPrompts` for Claude Code's sessions, in the transcript
    files their hooks named (``transcripts``: the Claude Code runtime's)."""

    def __init__(self, transcripts: TranscriptSource) -> None:
        self._transcripts = transcripts

    async def last_person_prompt(self, session: str) -> int | None:
        try:
            view = await self._transcripts.read(session, RECENT_MESSAGES)
        except HandOffError as e:
            _unreadable(session, e)
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
