"""What the tests of reading an opencode 2.x session's transcript (its tool calls, a
person's prompts) share: a 2.x client that answers what the test sets, the 1.x side of a
server found to be a 2.x, and a person's prompt to a session of the 2.x stand-in."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from pigeond.delivery.opencode_client import SpeaksV2
from testkit.opencode_v2_session import StandInSession
from tests.test_tool_call_reader import StubOpencode


class StubV2:
    """The 2.x client a reader asks (``messages``), with what it answers."""

    def __init__(self, messages: list[dict[str, Any]] | Exception) -> None:
        self.answer = messages
        self.asked: list[tuple[str, int | None]] = []
        self.hang: Deferred[None] | None = None

    async def messages(self, session_id: str, limit: int | None) -> list[dict[str, Any]]:
        self.asked.append((session_id, limit))
        if self.hang is not None:
            await self.hang
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def found_2x() -> StubOpencode:
    """The 1.x side of a server found to be a 2.x: every 1.x read refused."""
    return StubOpencode(SpeaksV2("GET /session/ses_known/message: opencode is 2.3.0 (2.x)"))


def person_prompt(session: StandInSession, text: str) -> None:
    """A person's prompt, admitted to the session's queue: it starts a turn."""
    body = {"prompt": {"text": text}, "delivery": "queue"}
    session.admit("user", None, text, "queue", True, body)
