"""When a person last prompted a session: the hop brake's reset, read from transcripts.

pigeond reads opencode's transcripts anyway (pigeond/delivery/verifier.py); a person's own
prompt is a user message with words of its own: at least one non-synthetic text part,
and none that begins with a swarm envelope's opening tag (what pigeond hands off; a
payload is escaped and can never begin a part with a tag).  Read only when the hop brake
would hold a send (pigeond/brakes/hops.py), and only the newest messages: a prompt older
than those is older than the thread's last reset in practice.

Sessions of other runtimes (Claude Code, MCP-only members) answer None: unknown.  So does
a session opencode does not have, or a transcript that cannot be read now: the hold then
stands, and a person can release it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.logger import Logger

from pigeond.delivery.failures import HandOffError
from pigeond.delivery.opencode_client import SessionNotFound, user_texts_of
from pigeond.delivery.opencode_transcript import TranscriptReader, envelope_ids
from pigeond.delivery.registry import DirectoryResolver
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
            if runtime_of(session) is not Runtime.OPENCODE:
                return None
        except ValueError:
            return None
        try:
            directory = await self._registry.resolve(session)
            messages = await self._client.messages(session, directory, RECENT_MESSAGES)
        except SessionNotFound:
            return None
        except HandOffError as e:
            log.info("cannot read {session}'s transcript for a person's prompt: {error}",
                     session=session, error=str(e))  # fmt: skip
            return None
        return newest_person_prompt(messages)
