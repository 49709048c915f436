"""The runtimes beside opencode, wired: Claude Code sessions and MCP-only members.

Built once per daemon with delivery on (:func:`member_parts`), given to the arbiter as
runtimes, to the verifier as a turn count, to the API as ``/swarm/agent/*``
(:class:`~pigeond.delivery.member_doors.MemberDoors`), and to the name and channel routes
as a liveness that asks each member's own runtime (:class:`MemberLiveness`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorThreads, IReactorTime
from twisted.internet.threads import deferToThreadPool

from pigeond.delivery.claude_runtime import ClaudeRuntime, ClaudeTranscripts, McpRuntime
from pigeond.delivery.member_doors import TranscriptPaths
from pigeond.delivery.opencode_client import OpencodeClient
from pigeond.delivery.opencode_v2_events import V2Events
from pigeond.delivery.opencode_v2_tool_calls import V2Messages
from pigeond.delivery.pull_slots import PullSlots
from pigeond.delivery.registry import SessionDirectoryRegistry
from pigeond.delivery.tool_call_reader import ClaudeToolCalls, OpencodeToolCalls, ToolCallReaders
from pigeond.delivery.transcript_reads import TranscriptReadWatch
from pigeond.delivery.turns import TurnCount, TurnTracker
from pigeond.model import Runtime, runtime_of
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database
from pigeond.tool_calls import ToolCallReader

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class MemberParts:
    slots: PullSlots
    paths: TranscriptPaths
    claude: ClaudeRuntime
    mcp: McpRuntime
    # every runtime's transcript reads that pass their deadline (opencode's client tells
    # it too), for /health
    reads: TranscriptReadWatch
    in_thread: Callable[[Callable[[], Any]], Deferred[Any]]  # a blocking call off the reactor


def member_parts(db: Database, reactor: IReactorTime) -> MemberParts:
    """The Claude Code and MCP-only runtimes; transcripts are read in the reactor's
    thread pool (a file read never holds the reactor)."""

    def in_thread(call: Callable[[], T]) -> Deferred[T]:
        threads = IReactorThreads(reactor)  # the real reactor's pool (a Clock has none)
        return deferToThreadPool(threads, threads.getThreadPool(), call)

    slots = PullSlots()
    paths = TranscriptPaths(db, reactor)
    reads = TranscriptReadWatch(reactor)
    claude = ClaudeRuntime(slots, ClaudeTranscripts(paths.path_of, in_thread, reactor, reads))
    return MemberParts(slots, paths, claude, McpRuntime(slots), reads, in_thread)


def tool_call_readers(
    members: MemberParts,
    reactor: IReactorTime,
    opencode: tuple[SessionDirectoryRegistry, OpencodeClient] | None,
    v2: V2Messages | None = None,
) -> ToolCallReaders:
    """Each member's recent pigeond tool calls, read from its own transcript: Claude Code's
    file, and opencode's sessions when delivery reaches an opencode (``opencode``: its
    directory registry and client; ``v2``: the 2.x client on its URL, read once the server
    is found to be a 2.x); None for any other member."""
    readers: dict[Runtime, ToolCallReader] = {
        Runtime.CLAUDE: ClaudeToolCalls(members.paths.path_of, members.in_thread, reactor)
    }
    if opencode is not None:
        readers[Runtime.OPENCODE] = OpencodeToolCalls(*opencode, reactor, v2=v2)
    return ToolCallReaders(readers)


class NoDelivery:
    """The drains of a daemon with delivery off: none starts, so every ask is answered
    with nothing at once (a Claude Code session stops as if pigeond were not there)."""

    def start_drain(self, target: str) -> bool:
        return False


def turns_ended_of(
    claude: ClaudeRuntime, turns: TurnTracker | None, v2: V2Events | None = None
) -> Callable[[str], TurnCount | None]:
    """Each target's turn-end count, from its own runtime (see the verifier): an opencode
    target's from the 2.x event stream while opencode is found to be a 2.x (``v2``),
    else from the 1.x tracker."""

    def turns_ended(target: str) -> TurnCount | None:
        if _runtime(target) is Runtime.CLAUDE:
            return claude.turns_ended(target)
        if v2 is not None and v2.active:
            return v2.turns_ended(target)
        return turns.turns_ended(target) if turns is not None else None

    return turns_ended


def _runtime(session: str) -> Runtime | None:
    try:
        return runtime_of(session)
    except ValueError:
        return None


class MemberLiveness:
    """Whether a session exists, asked of its own runtime: opencode for its sessions, the
    members that registered for the others (a name held by a live Claude Code session
    must not be taken as if its holder were gone)."""

    def __init__(self, registry: SessionDirectoryRegistry, db: Database) -> None:
        self._registry = registry
        self._db = db

    def cached(self, session_id: str) -> bool:
        return _runtime(session_id) is Runtime.OPENCODE and self._registry.cached(session_id)

    def can_look_up_now(self, session_id: str) -> bool:
        """A member's liveness is a database read; an opencode session's may wait for one of
        the registry's lookup slots."""
        return _runtime(session_id) is not Runtime.OPENCODE or self._registry.can_look_up_now(
            session_id
        )

    def invalidate(self, session_id: str) -> None:
        self._registry.invalidate(session_id)

    async def resolve(self, session_id: str) -> str:
        return await self._registry.resolve(session_id)

    async def exists(self, session_id: str) -> bool | None:
        if _runtime(session_id) is Runtime.OPENCODE:
            return await self._registry.exists(session_id)
        # a member says itself that it exists (its hooks, its reads, its name claim)
        return bool(await self._db.read(SwarmRepository.is_known_member, session_id))
