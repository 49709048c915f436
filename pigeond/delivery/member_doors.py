"""The doors of the members that ask for their messages (Claude Code, MCP-only members).

The HTTP routes ``/swarm/agent/*`` (:mod:`pigeond.api.agents`) call these: a Claude Code
session's hooks say it started, that a person's prompt runs, that its turn ended (and
take the batch handed off then); a channel or an MCP-only member's read asks for what is
due.  Each ask opens a :class:`~pigeond.delivery.pull_slots.PullSlot` and starts the
target's drain: the batch, if any, goes through the same steps as every hand-off.  An
ask is answered within :data:`ANSWER_WITHIN_S` (a hook never holds a session up), or, a
channel's, when its own wait is over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pigeond.delivery.claude_runtime import ClaudeRuntime
from pigeond.delivery.pull_slots import NOTHING, Ask, Handed, PullSlots
from pigeond.model import Runtime, runtime_of
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database

log = Logger()

# A turn end's or a read's ask is answered within this, batch or not: the Stop hook gives
# up after 2 s, and a session must never wait on pigeond longer than that.
ANSWER_WITHIN_S: Final = 1.0
# A member's registration is written again at most this often (its last_seen_at).
REGISTER_EVERY_S: Final = 60.0


class Drains(Protocol):
    """What the doors need of the arbiter."""

    def start_drain(self, target: str) -> bool: ...


class TranscriptPaths:
    """Where each Claude Code session's transcript is: told by its hooks, kept in memory
    and in ``swarm_members`` (a restart must find a hand-off in doubt in it)."""

    def __init__(self, db: Database, clock: IReactorTime) -> None:
        self._db = db
        self._clock = clock
        self._paths: dict[str, str] = {}
        self._registered_at: dict[str, float] = {}

    def path_of(self, session: str) -> Deferred[str | None]:
        known = self._paths.get(session)
        if known is not None:
            return succeed(known)
        return Deferred.fromCoroutine(self._stored_path(session))

    async def _stored_path(self, session: str) -> str | None:
        member = await self._db.read(SwarmRepository.member, session)
        if member is None or member.transcript_path is None:
            return None
        self._paths.setdefault(session, member.transcript_path)
        return member.transcript_path

    async def register(self, session: str, runtime: Runtime, path: str | None) -> None:
        """Record the member (and its transcript path); written when new, moved, or not
        written for :data:`REGISTER_EVERY_S`."""
        now = self._clock.seconds()
        moved = path is not None and self._paths.get(session) != path
        if (
            not moved
            and now - self._registered_at.get(session, -REGISTER_EVERY_S) < REGISTER_EVERY_S
        ):
            return
        await self._db.write(
            SwarmRepository.register_member, session, runtime.value, path, int(now * 1000)
        )
        if path is not None:
            self._paths[session] = path
        self._registered_at[session] = now


class MemberDoors:
    def __init__(
        self,
        clock: IReactorTime,
        slots: PullSlots,
        claude: ClaudeRuntime,
        paths: TranscriptPaths,
        drains: Drains,
        *,
        verify: Callable[[str], None] = lambda target: None,
        delivering: bool = True,
    ) -> None:
        """``verify`` looks in a target's transcript now (its turn just ended: what it was
        given is there, and perhaps answered).  ``delivering`` False: a daemon with delivery
        off, whose drains never start."""
        self._clock = clock
        self._slots = slots
        self._claude = claude
        self._paths = paths
        self._drains = drains
        self._verify = verify
        self.delivering = delivering

    async def claude_event(self, session: str, event: str, transcript_path: str) -> None:
        """``session_start`` or ``prompt_submit`` from a Claude Code session's hook."""
        if event == "session_start":
            self._claude.started(session)
        else:
            self._claude.prompt_submitted(session)
        await self._paths.register(session, Runtime.CLAUDE, transcript_path)
        if event == "session_start":
            self._drains.start_drain(session)  # a channel listening already: due ones go

    async def turn_end(self, session: str, transcript_path: str) -> dict[str, object]:
        """The session's turn ended: its next batch, handed off now, or nothing."""
        self._claude.turn_ended(session)
        await self._paths.register(session, Runtime.CLAUDE, transcript_path)
        self._verify(session)
        handed = await self._ask(session, Ask.TURN_END, ANSWER_WITHIN_S)
        if handed is None:
            self._claude.went_idle(session)
            self._drains.start_drain(session)  # its channel, if it listens, may take more
            return NOTHING
        return handed.view()

    async def wait(self, session: str, wait_s: float) -> dict[str, object]:
        """A channel's ask (a Claude Code session) or a read's (an MCP-only member)."""
        if runtime_of(session) is Runtime.MCP:
            await self._paths.register(session, Runtime.MCP, None)
            # a read takes what is due now: answered when its drain ends, whatever wait_s
            handed = await self._ask(session, Ask.READ, ANSWER_WITHIN_S)
        else:
            handed = await self._ask(session, Ask.IDLE, wait_s)
        return NOTHING if handed is None else handed.view()

    async def _ask(self, session: str, ask: Ask, within_s: float) -> Handed | None:
        slot = self._slots.open(session, ask)
        timer = self._clock.callLater(within_s, slot.give, None)
        try:
            if not self._drains.start_drain(session) and ask is not Ask.IDLE:
                slot.give(None)  # held (a failure being waited out, or pigeond stopping)
            return await slot.answer
        finally:
            if timer.active():
                timer.cancel()
