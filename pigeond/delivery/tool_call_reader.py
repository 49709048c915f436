"""A member's recent pigeond tool calls, read from its own transcript
(:class:`pigeond.tool_calls.ToolCallReader`, one reader per runtime).

What the runtimes write while a pigeond tool runs (measured with the real runtimes, recorded
in tests/fixtures/opencode/tool-running-*.json and tests/fixtures/claude/mcp_swarm_name.jsonl):

- opencode 1.18.33 and 1.15.4 store the tool part before they run the plugin's tool:
  while ``execute`` runs, ``GET /session/<id>/message`` has, in the newest assistant
  message, ``{"type": "tool", "callID": "call_…", "tool": "swarm_name", "state":
  {"status": "running", "input": {…the model's arguments…}, "time": {"start": …}}}``;
  once it returns, ``status`` is ``"completed"`` (with ``output``) or ``"error"``.
- Claude Code 2.1.332 writes the assistant entry with the ``tool_use`` block
  (``{"type": "tool_use", "id": "toolu_…", "name": "mcp__pigeon__swarm_name", "input":
  {…}}``) a little *after* it calls the MCP server: 20 to 80 ms later in the measurements
  (and the transcript file of a new session may not exist yet when the first call starts).
  Whoever looks for a call in flight must look again for a moment before concluding it
  is not there.  Claude Code passes the same id to the MCP server as
  ``params._meta["claudecode/toolUseId"]``.  The call is finished once a user entry holds a
  ``tool_result`` block with that ``tool_use_id``.

Only the calls of pigeond's own tools (:data:`pigeond.agents.tool_names.TOOL_NAMES`) are
returned: nothing else can have made a request to pigeond.  A session of an opencode 2.x
is read in its 2.x transcript (:mod:`pigeond.delivery.opencode_v2_tool_calls`) once the
1.x read finds the server to be a 2.x, as the delivery's reads switch
(:mod:`pigeond.delivery.opencode_dialect`): no 2.x route is asked of a server not found
to be a 2.x.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.interfaces import IReactorTime

from pigeond.agents.tool_names import TOOL_NAMES
from pigeond.delivery.claude_transcript import read_tail
from pigeond.delivery.failures import HandOffError
from pigeond.delivery.opencode_client import OpencodeError, SessionNotFound, SpeaksV2
from pigeond.delivery.opencode_transcript import TranscriptReader
from pigeond.delivery.opencode_v2_tool_calls import V2Messages, opencode_v2_calls, tool_part_call
from pigeond.delivery.registry import DirectoryResolver
from pigeond.model import Runtime, runtime_of
from pigeond.tool_calls import ToolCall, ToolCallReader, TranscriptUnreadable

T = TypeVar("T")
InThread = Callable[[Callable[[], T]], Deferred[T]]

# How many of an opencode session's newest messages are read: a call in flight is in the
# newest one, a send's call a few turns back at most by the time it is looked for.
RECENT_MESSAGES: Final = 20
# How much of a Claude Code transcript's end is read: a tool's output can be large, but a
# call in flight is in the last entries.
CLAUDE_TAIL_BYTES: Final = 1024 * 1024
# One read of a transcript may take this long; past it the transcript is unreadable now.
READ_DEADLINE_S: Final = 10.0
# Claude Code's name for an MCP server's tool: mcp__<server>__<tool>
_MCP_TOOL = re.compile(r"^mcp__.+__([a-z_]+)$")


def opencode_calls(messages: Iterable[Mapping[str, Any]]) -> list[ToolCall]:
    """The pigeond tool calls in opencode messages (``GET /session/<id>/message``), in order."""
    calls = []
    for message in messages:
        info = message.get("info")
        if not isinstance(info, dict) or info.get("role") != "assistant":
            continue
        for part in message.get("parts") or []:
            call = _opencode_call(part)
            if call is not None:
                calls.append(call)
    return calls


def _opencode_call(part: object) -> ToolCall | None:
    if not isinstance(part, dict) or part.get("type") != "tool":
        return None
    return tool_part_call(part.get("tool"), part.get("callID"), part.get("state"))


def claude_calls(entries: Iterable[Mapping[str, Any]]) -> list[ToolCall]:
    """The pigeond tool calls (MCP ``tool_use`` blocks) in Claude Code transcript entries,
    in order; each finished once a later entry holds its ``tool_result``."""
    found: list[tuple[str, str, Mapping[str, Any]]] = []
    results: set[str] = set()
    for entry in entries:
        kind = entry.get("type")
        message = entry.get("message")
        if entry.get("isSidechain") is True or not isinstance(message, dict):
            continue
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if kind == "assistant" and block.get("type") == "tool_use":
                use = _claude_use(block)
                if use is not None:
                    found.append(use)
            elif (
                kind == "user"
                and block.get("type") == "tool_result"
                and isinstance(block.get("tool_use_id"), str)
            ):
                results.add(block["tool_use_id"])
    return [ToolCall(i, tool, arguments, i in results) for i, tool, arguments in found]


def _claude_use(block: Mapping[str, Any]) -> tuple[str, str, Mapping[str, Any]] | None:
    name, use_id, arguments = block.get("name"), block.get("id"), block.get("input")
    match = _MCP_TOOL.match(name) if isinstance(name, str) else None
    if match is None or match.group(1) not in TOOL_NAMES:
        return None
    if not isinstance(use_id, str) or not isinstance(arguments, dict):
        return None
    return use_id, match.group(1), arguments


async def _within(clock: IReactorTime, deadline_s: float, work: Deferred[T], what: str) -> T:
    work.addTimeout(deadline_s, clock)
    try:
        return await work
    except DeferredTimeout as e:
        raise TranscriptUnreadable(f"{what} took longer than {deadline_s:g} s") from e


class OpencodeToolCalls:
    """An opencode session's pigeond tool calls: its newest :data:`RECENT_MESSAGES` messages,
    read in the session's own directory from a 1.x, or by its id alone from a server the
    1.x client found to be a 2.x (``v2``: the 2.x client on the same URL; without it a 2.x
    session has no transcript pigeond reads, None)."""

    def __init__(
        self,
        registry: DirectoryResolver,
        client: TranscriptReader,
        clock: IReactorTime,
        *,
        v2: V2Messages | None = None,
        deadline_s: float = READ_DEADLINE_S,
    ) -> None:
        self._registry = registry
        self._client = client
        self._v2 = v2
        self._clock = clock
        self._deadline_s = deadline_s

    async def recent_calls(self, member: str) -> Sequence[ToolCall] | None:
        if not _is(member, Runtime.OPENCODE):
            return None
        read = Deferred.fromCoroutine(self._messages(member))
        try:
            messages = await _within(self._clock, self._deadline_s, read, f"reading {member}")
        except SpeaksV2:  # the 1.x client asks a 2.x nothing: read it as a 2.x
            if self._v2 is None:
                return None
            v2_read = Deferred.fromCoroutine(self._v2_messages(self._v2, member))
            what = f"reading {member}"
            v2_messages = await _within(self._clock, self._deadline_s, v2_read, what)
            return opencode_v2_calls(v2_messages)
        return [] if messages is None else opencode_calls(messages)

    @staticmethod
    async def _v2_messages(client: V2Messages, member: str) -> list[dict[str, Any]]:
        try:
            return await client.messages(member, RECENT_MESSAGES)  # a session it lacks: []
        except HandOffError as e:
            raise TranscriptUnreadable(f"cannot read {member}'s 2.x transcript: {e}") from e

    async def _messages(self, member: str) -> list[dict[str, Any]] | None:
        try:
            directory = await self._registry.resolve(member)
            return await self._client.messages(member, directory, RECENT_MESSAGES)
        except SessionNotFound:
            return None  # no such session: it made no call
        except SpeaksV2:
            raise
        except OpencodeError as e:
            raise TranscriptUnreadable(f"cannot read {member}'s transcript: {e}") from e


class ClaudeToolCalls:
    """A Claude Code session's pigeond tool calls: the end of the transcript file its hooks
    named (read in a thread: a file read never holds the reactor)."""

    def __init__(
        self,
        path_of: Callable[[str], Deferred[str | None]],
        in_thread: InThread[Any],
        clock: IReactorTime,
        *,
        deadline_s: float = READ_DEADLINE_S,
        tail_bytes: int = CLAUDE_TAIL_BYTES,
    ) -> None:
        """``path_of`` finds a session's transcript path (memory, then the database)."""
        self._path_of = path_of
        self._in_thread = in_thread
        self._clock = clock
        self._deadline_s = deadline_s
        self._tail_bytes = tail_bytes

    async def recent_calls(self, member: str) -> Sequence[ToolCall] | None:
        if not _is(member, Runtime.CLAUDE):
            return None
        path = await self._path_of(member)
        if path is None:
            return None  # its hooks never named a transcript: pigeond has none to read
        read = self._in_thread(lambda: read_tail(path, self._tail_bytes))
        try:
            entries = await _within(self._clock, self._deadline_s, read, f"reading {path}")
        except OSError as e:
            raise TranscriptUnreadable(
                f"cannot read {member}'s transcript {path}: {e.strerror or e}"
            ) from e
        return claude_calls(entries)


class ToolCallReaders:
    """Each member's reader, told by its id (:func:`pigeond.model.runtime_of`): opencode
    sessions and Claude Code sessions have one; an MCP-only member or any other id has
    none (None: pigeond has no transcript of it)."""

    def __init__(self, readers: Mapping[Runtime, ToolCallReader]) -> None:
        self._readers = dict(readers)

    async def recent_calls(self, member: str) -> Sequence[ToolCall] | None:
        try:
            reader = self._readers.get(runtime_of(member))
        except ValueError:
            return None
        return None if reader is None else await reader.recent_calls(member)


def _is(member: str, runtime: Runtime) -> bool:
    try:
        return runtime_of(member) is runtime
    except ValueError:
        return False
