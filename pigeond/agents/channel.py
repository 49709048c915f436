"""The Claude Code channel (research preview): pigeond's hand-offs pushed into an idle
Claude Code session as ``notifications/claude/channel``.

A background long-poll of ``POST /swarm/agent/wait`` (wait_s 25): each batch pigeond
hands off comes back as its envelopes' text and is sent as one notification with
``meta {"from": "pigeond"}``.  Claude Code does not tell an MCP server whether it listens
on the channel (its ``initialize`` is the same with and without
``--dangerously-load-development-channels``), so pigeon-mcp polls only when started with
``--channel``: a batch taken while nobody listens would be handed off and never reach
the transcript.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Final, TextIO

import anyio

from pigeond.agents.daemon_link import Daemon, ToolError
from pigeond.agents.escaping import field
from pigeond.agents.mcp_tools import WAIT_PATH

WAIT_S: Final = 25
# the daemon answers after wait_s; the request may take a little longer than that
WAIT_TIMEOUT_S: Final = WAIT_S + 10.0
MAX_BACKOFF_S: Final = 30.0
CHANNEL_METHOD: Final = "notifications/claude/channel"

Notify = Callable[[str], Awaitable[None]]


class ChannelPoller:
    """Takes what pigeond hands the session and pushes it; never gives up, never spins:
    a daemon that is down or lacks the route is asked again after a growing pause."""

    def __init__(
        self,
        session: str,
        daemon: Callable[[], Daemon],
        notify: Notify,
        *,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        log: TextIO = sys.stderr,
    ) -> None:
        self.session = session
        self.daemon = daemon
        self.notify = notify
        self.sleep = sleep
        self.log = log
        self.pushed = 0
        self._last_problem: str | None = None

    def say(self, problem: str | None) -> None:
        """One stderr line per change of problem (not one a poll)."""
        if problem is not None and problem != self._last_problem:
            print(f"pigeon-mcp: channel: {problem}", file=self.log, flush=True)
        self._last_problem = problem

    def poll_once(self) -> tuple[str | None, str | None]:
        """One long-poll (blocking, in a worker thread): the text to push, or the problem."""
        body = {"session": self.session, "wait_s": WAIT_S}
        try:
            answer = self.daemon().once("channel", "POST", WAIT_PATH, body, WAIT_TIMEOUT_S)
        except ToolError as e:
            return None, str(e)
        if answer.status == 404:
            return None, f"pigeond answered 404 to {WAIT_PATH}: {field(answer.body.get('error'))}"
        if answer.status != 200:
            why = field(answer.body.get("error") or "", 300)
            return None, f"pigeond refused {WAIT_PATH} (HTTP {answer.status}): {why}"
        text = answer.body.get("text")
        return (text if isinstance(text, str) and text else None), None

    async def run(self) -> None:
        backoff = 1.0
        while True:
            text, problem = await anyio.to_thread.run_sync(self.poll_once, abandon_on_cancel=True)
            self.say(problem)
            if problem is not None:
                await self.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            backoff = 1.0
            if text is not None:
                await self.notify(text)
                self.pushed += 1
