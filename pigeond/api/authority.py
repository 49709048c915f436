"""Who may act on a session's own things: its name, its consent, its channels.

A request says which session it is for (``session``, the policy's path, a member's path),
and any process of the user could write any id there.  So taking or releasing a name,
setting or releasing a session's policy, and joining or removing a session from a channel
are allowed only:

- to **the session itself**: its own pigeond tool call (``swarm_name``, ``swarm_policy``,
  ``swarm_channel``), still in flight and with the same input as the request, is found in
  its own transcript (:mod:`pigeond.tool_calls`).  Another process can send any request,
  but it cannot put a call into another session's transcript;
- to **a person**: a shell at a terminal with no agent among its ancestors, over the Unix
  socket (:func:`pigeond.api.callers.caller_of`), such as ``pigeon name set`` typed by the
  operator.

Anything else is a 403 naming who may.  What this stops is an agent (confused, or told to
by a prompt injection) acting through pigeond as another session.  It does not stop a
process of the same user that talks to opencode itself (opencode 1.x has no
authentication on its port) or edits the database: those were never pigeond's to guard.

A runtime writes the call at its own pace (measured, see
:mod:`pigeond.delivery.tool_call_reader`): opencode stores the tool part before it runs the
plugin's tool, so one read tells; Claude Code writes the ``tool_use`` line tens of
milliseconds after it calls the MCP server, so a Claude Code session's transcript is read
again for up to :data:`OWN_CALL_WAIT_S` before the request is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.web import server

from pigeond.api.callers import Caller, caller_of
from pigeond.api.web import HttpError
from pigeond.model import Runtime, runtime_of
from pigeond.tool_calls import ToolCall, ToolCallReader, TranscriptUnreadable

# A request may name the tool call making it (the plugin sends opencode's callID): then
# exactly that call must be the one running.
CALL_ID_FIELD: Final = "call_id"
CALL_ID_RE: Final = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
# Who acted, as stored (a policy's ``by``) when it was a person and not a session.
PERSON: Final = "person"
# How long a Claude Code session's own call is looked for (it is written 20-80 ms after
# the MCP call starts), and how often its transcript is read meanwhile.
OWN_CALL_WAIT_S: Final = 2.0
OWN_CALL_POLL_S: Final = 0.2
# Transcript reads under way at once for these checks: each costs opencode a request (or a
# file read), and a flood of requests naming others' sessions must not turn into a flood
# at opencode.  Beyond it a request is answered 429, as a busy sender is.
MAX_CHECKS_IN_FLIGHT: Final = 16
RETRY_AFTER_S: Final = 1
OPERATOR_HINT: Final = (
    "or a person at a terminal over the Unix socket (an operator: pigeon {command})"
)


def call_id_of(value: object) -> str | None:
    """A request's ``call_id`` (None when not given); a 400 when it is malformed."""
    if value is None:
        return None
    if not isinstance(value, str) or not CALL_ID_RE.fullmatch(value):
        raise HttpError(400, f"{CALL_ID_FIELD} must match {CALL_ID_RE.pattern}")
    return value


@dataclass(frozen=True, slots=True)
class OwnCall:
    """The tool call that would make a request a session's own: its tool, and whether a
    call's input asks for what the request does."""

    tool: str
    matches: Callable[[Mapping[str, Any]], bool]
    what: str  # what the request does, for the refusal: "claim the name reviewer"
    command: str  # the operator's way to do it: "name set reviewer ses_…"


class SessionAuthority:
    """Answers whether a request may act for a session (see the module's docstring).

    ``reader`` finds the session's own tool calls (None: pigeond reads no transcript, so
    only a person may act); ``caller`` tells who sent a request (a test replaces it)."""

    def __init__(
        self,
        reader: ToolCallReader | None,
        clock: IReactorTime,
        *,
        caller: Callable[[server.Request], Caller] = caller_of,
    ) -> None:
        self.reader = reader
        self.caller = caller
        self._clock = clock
        self._in_flight = 0

    def is_person(self, request: server.Request) -> bool:
        return self.caller(request).person

    async def acting_for(
        self, request: server.Request, session: str, call: OwnCall, call_id: str | None = None
    ) -> str:
        """Who acts: :data:`PERSON`, or ``session`` when its own call is in flight (the one
        named ``call_id`` when the client names it); a 403 otherwise."""
        if self.is_person(request):
            return PERSON
        if self._in_flight >= MAX_CHECKS_IN_FLIGHT:
            raise HttpError(
                429,
                f"too many requests acting for sessions are being checked now"
                f" ({MAX_CHECKS_IN_FLIGHT}); nothing changed, retry in {RETRY_AFTER_S} s",
                {"retry_after_s": RETRY_AFTER_S},
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self._in_flight += 1
        try:
            why = await self._own_call_missing(session, call, call_id)
        finally:
            self._in_flight -= 1
        if why is None:
            return session
        raise HttpError(
            403,
            f"only {session} itself may {call.what} (its own {call.tool} tool call, found in"
            f" its transcript), {OPERATOR_HINT.format(command=call.command)}: {why}",
        )

    def person_only(self, request: server.Request, what: str, command: str) -> str:
        """:data:`PERSON` when a person sent ``request``; a 403 otherwise."""
        if self.is_person(request):
            return PERSON
        raise HttpError(
            403,
            f"only a person at a terminal may {what} (pigeon {command}, over the Unix"
            " socket): no session's own tool does it",
        )

    async def _own_call_missing(
        self, session: str, call: OwnCall, call_id: str | None
    ) -> str | None:
        """None when the call is found; else why not, in a few words."""
        if self.reader is None:
            return f"pigeond reads no transcript of {session}"
        looks = 1 + (round(OWN_CALL_WAIT_S / OWN_CALL_POLL_S) if _written_late(session) else 0)
        for look in range(looks):
            if look:
                await deferLater(self._clock, OWN_CALL_POLL_S, lambda: None)
            try:
                calls = await self.reader.recent_calls(session)
            except TranscriptUnreadable as e:
                return f"{session}'s transcript could not be read: {e}"
            if calls is None:
                return f"pigeond has no transcript of {session} to look in"
            if _found(calls, call, call_id):
                return None
        named = f" {call_id}" if call_id else ""
        return f"no {call.tool} call{named} in flight with this request's input"


def _found(calls: Sequence[ToolCall], call: OwnCall, call_id: str | None) -> bool:
    return any(
        c.tool == call.tool
        and not c.finished
        and (call_id is None or c.call_id == call_id)
        and call.matches(c.input)
        for c in calls
    )


def _written_late(session: str) -> bool:
    """Whether the session's runtime writes a call after calling the tool (Claude Code)."""
    try:
        return runtime_of(session) is Runtime.CLAUDE
    except ValueError:
        return False
