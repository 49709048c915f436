"""Who is really asking: the caller of a request as the kernel knows it, not as its body
says.

A request's ``from`` (or ``session``, or ``by``) is what the client claims.  Over the Unix
socket the kernel names the client's process (``SO_PEERCRED``), and ``/proc`` says whether
an agent started it or a person's terminal did (:mod:`pigeond.processes`).  The flood guard
charges this caller, and a person's shell is told from an agent by it.  Over TCP the
kernel names no process: every TCP client is one caller, :data:`TCP_CALLER`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from twisted.web import server

from pigeond.api.access import unix_peer
from pigeond.processes import ProcessView, inspect_process

TCP_CALLER: Final = "tcp"
UNKNOWN_CALLER: Final = "unix:unknown"


@dataclass(frozen=True, slots=True)
class Caller:
    """The process behind a request, as far as the kernel tells."""

    key: str  # what the flood guard charges: one agent process, one login session, or TCP
    pid: int | None
    agent: str | None  # the agent program that started it ("opencode", "claude", "codex")
    person: bool  # a person's shell: a terminal, and no agent among its ancestors

    def describe(self) -> str:
        """A few words for logs and notes: "pid 4242, started by opencode (pid 4000)"."""
        if self.pid is None:
            return "a TCP client" if self.key == TCP_CALLER else "an unknown process"
        if self.agent is not None:
            return f"pid {self.pid}, started by {self.agent}"
        return f"pid {self.pid}, at a terminal" if self.person else f"pid {self.pid}"


Inspect = Callable[[int], ProcessView | None]


def caller_of_view(view: ProcessView | None, pid: int) -> Caller:
    """The caller for a Unix peer ``pid`` whose process looked like ``view``."""
    if view is None:
        return Caller(UNKNOWN_CALLER, pid or None, None, False)
    if view.agent_pid is not None:
        # every process an agent starts (its plugin, bash tool, MCP server) is that agent
        return Caller(f"agent:{view.agent_pid}", pid, view.agent, False)
    return Caller(f"session:{view.sid}", pid, None, view.person)


def caller_of(request: server.Request, inspect: Inspect = inspect_process) -> Caller:
    """The caller of ``request`` (after the access gate, so a Unix peer is readable)."""
    peer = unix_peer(request)
    if peer is None:
        return Caller(TCP_CALLER, None, None, False)
    return caller_of_view(inspect(peer.pid), peer.pid)
