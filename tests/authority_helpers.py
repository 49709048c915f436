"""Acting on a session's own things in memory (pigeond/api/authority.py): as a person, or
as the session itself with its own tool call in flight, shown by a stand-in reader.

In memory a request comes from no Unix peer (a TCP client: not a person) and no runtime
has a transcript, so a test of the name, policy or channel routes says which of the two
its requests are."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.web import server

from pigeond.api.authority import SessionAuthority
from pigeond.api.callers import Caller
from pigeond.service.daemon import Daemon
from pigeond.tool_calls import ToolCall, ToolCallReader

PERSON_CALLER = Caller("session:4000", 4242, None, person=True)
AGENT_CALLER = Caller("agent:4000", 4343, "opencode", person=False)


def a_person(request: server.Request) -> Caller:
    return PERSON_CALLER


def an_agent(request: server.Request) -> Caller:
    return AGENT_CALLER


class CallsInFlight:
    """A stand-in :class:`pigeond.tool_calls.ToolCallReader`: each session's transcript
    holds the calls a test started (and did not finish)."""

    def __init__(self) -> None:
        self.calls: dict[str, list[ToolCall]] = {}
        self._ids = itertools.count(1)

    def start(self, session: str, tool: str, **arguments: Any) -> ToolCall:
        """``session``'s model calls ``tool`` with ``arguments``; the call runs."""
        call = ToolCall(f"call_{next(self._ids)}", tool, arguments, finished=False)
        self.calls.setdefault(session, []).append(call)
        return call

    def finish_all(self) -> None:
        self.calls = {
            s: [ToolCall(c.call_id, c.tool, c.input, finished=True) for c in calls]
            for s, calls in self.calls.items()
        }

    async def recent_calls(self, member: str) -> Sequence[ToolCall] | None:
        if member.startswith("mcp_"):
            return None
        return list(self.calls.get(member, []))


def person_authority(clock: IReactorTime) -> SessionAuthority:
    """Routes built by a test on their own, asked by a person (the operator's pigeon)."""
    return SessionAuthority(None, clock, caller=a_person)


def agent_authority(clock: IReactorTime, calls: ToolCallReader) -> SessionAuthority:
    """Routes built by a test on their own, asked by an agent; ``calls`` are the sessions'
    own calls in flight."""
    return SessionAuthority(calls, clock, caller=an_agent)


def as_person(daemon: Daemon) -> Daemon:
    """Every request to ``daemon`` comes from a person at a terminal."""
    assert daemon.authority is not None
    daemon.authority.caller = a_person
    return daemon


def as_agents(daemon: Daemon) -> CallsInFlight:
    """Every request to ``daemon`` comes from an agent's process; the returned reader holds
    the sessions' own calls in flight (none until a test starts one)."""
    assert daemon.authority is not None
    calls = CallsInFlight()
    daemon.authority.caller = an_agent
    daemon.authority.reader = calls
    return calls
