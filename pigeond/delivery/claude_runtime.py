"""Claude Code sessions, and members with no session of their own, on the delivery seam.

A Claude Code session is *asked for*, never pushed to (:mod:`pigeond.delivery.pull_slots`):

* at the end of each turn its Stop hook asks; a batch handed off then is printed as the
  hook's ``{"decision": "block", "reason": …}`` and Claude Code runs one more turn with
  it; nothing due lets the session stop at once;
* while it is idle, its channel (``pigeon-mcp`` in a session started with pigeond's
  channel) asks; a batch is pushed as a channel notification and the idle session runs a
  turn.  A person's prompt (the UserPromptSubmit hook) makes it busy: nothing is pushed
  into a running turn.

Either way its transcript (the JSONL file every hook names) is where the hand-off is
verified and its answer found, as for opencode (:class:`ClaudeTranscripts`).

An MCP-only member (Codex: its client names no session) is asked for when its own
``swarm_read`` reads: what it is given is seen then (:class:`McpRuntime`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from pigeond.costs import EndedTurn
from pigeond.delivery.claude_transcript import answers_in, envelope_homes, read_tail
from pigeond.delivery.claude_usage import ended_turns
from pigeond.delivery.failures import FailureKind, HandOffError
from pigeond.delivery.pull_slots import Ask, Handed, PullSlot, PullSlots
from pigeond.delivery.runtime import Delivery, Prepared, TranscriptSource
from pigeond.delivery.transcript_reads import ReadTimedOut, TranscriptReadWatch, within_deadline
from pigeond.model import HandoffMode, Runtime

T = TypeVar("T")
# Runs a blocking call (a file read) off the reactor thread.
InThread = Callable[[Callable[[], T]], Deferred[T]]

# How much of a transcript's end is read for a look at its newest entries, per message
# looked for; the whole file only before giving up on a hand-off (a turn's tool output can
# be megabytes, so the bound is in bytes, never in lines).
TAIL_BYTES_PER_MESSAGE = 64 * 1024
MIN_TAIL_BYTES = 1024 * 1024
# A transcript larger than this is read from this far before its end even when "all" is
# asked for: a hand-off made lately is never further back.
MAX_READ_BYTES = 64 * 1024 * 1024

AT_TURN_END = "Claude Code: at the end of its turn (Stop hook)"
ON_CHANNEL = "Claude Code: pushed on its channel while idle"
ON_READ = "read by the member itself (swarm_read)"
_NOTES = {Ask.TURN_END: AT_TURN_END, Ask.IDLE: ON_CHANNEL, Ask.READ: ON_READ}


def _handoff_mode(ask: Ask) -> HandoffMode:
    return HandoffMode(None, None, None, None, _NOTES[ask])


async def _give(prepared: Prepared, texts: Sequence[str]) -> HandoffMode:
    slot = prepared.detail
    assert isinstance(slot, PullSlot)
    if not slot.give(Handed.of(texts)):
        raise HandOffError(
            "the session stopped asking before the batch was given to it",
            kind=FailureKind.NOT_TAKEN,
        )
    return _handoff_mode(slot.ask)


class ClaudeRuntime:
    """Claude Code sessions: asked for at turn end (Stop hook) and while idle (channel)."""

    name: Runtime = Runtime.CLAUDE
    steers: bool = False

    def __init__(self, slots: PullSlots, transcripts: TranscriptSource | None) -> None:
        self._slots = slots
        self.transcripts = transcripts
        # sessions known idle: their last turn ended and nothing was handed off since, and
        # no person's prompt came; only those are pushed to on their channel
        self._idle: set[str] = set()
        # each session's turn ends so far: the verifier looks for answers again only then
        self._turn_ends: dict[str, int] = {}

    def _asking(self, target: str) -> PullSlot | None:
        asks = (Ask.TURN_END, Ask.IDLE) if target in self._idle else (Ask.TURN_END,)
        return self._slots.first(target, asks)

    def may_take_now(self, target: str) -> bool:
        return self._asking(target) is not None

    async def prepare(self, target: str) -> Prepared | None:
        slot = self._asking(target)
        return None if slot is None else Prepared(False, slot)

    async def hand_off(
        self,
        target: str,
        prepared: Prepared,
        texts: Sequence[str],
        *,
        delivery: Delivery = Delivery.QUEUE,  # never steers: every batch after the turn
    ) -> HandoffMode:
        mode = await _give(prepared, texts)
        self._idle.discard(target)  # the batch runs a turn now
        return mode

    async def after_hand_off(self, target: str, prepared: Prepared) -> None:
        return None  # the next batch goes when the session asks again

    def drain_ended(self, target: str) -> None:
        self._slots.close(target, Ask.TURN_END)  # nothing due: the session may stop

    def stop(self) -> None:
        self._slots.close_all()

    # -- what the session's hooks say ---------------------------------------------------

    def started(self, session: str) -> None:
        """A session started (its SessionStart hook): idle until a prompt comes."""
        self._idle.add(session)

    def prompt_submitted(self, session: str) -> None:
        """A person's prompt (UserPromptSubmit): a turn runs; nothing is pushed into it."""
        self._idle.discard(session)

    def turn_ended(self, session: str) -> None:
        self._turn_ends[session] = self._turn_ends.get(session, 0) + 1

    def went_idle(self, session: str) -> None:
        """Its turn ended and nothing was handed off at the end of it: the session idles."""
        self._idle.add(session)

    def is_idle(self, session: str) -> bool:
        return session in self._idle

    def turns_ended(self, session: str) -> tuple[int, int] | None:
        """A count that changes whenever a turn of ``session`` ended (its Stop hook)."""
        return 0, self._turn_ends.get(session, 0)


class McpRuntime:
    """Members with no session of their own (``mcp_<name>``): asked for by their reads."""

    name: Runtime = Runtime.MCP
    steers: bool = False
    transcripts: TranscriptSource | None = None  # what a read is given is seen then

    def __init__(self, slots: PullSlots) -> None:
        self._slots = slots

    def may_take_now(self, target: str) -> bool:
        return self._slots.first(target, (Ask.READ,)) is not None

    async def prepare(self, target: str) -> Prepared | None:
        slot = self._slots.first(target, (Ask.READ,))
        return None if slot is None else Prepared(False, slot)

    async def hand_off(
        self,
        target: str,
        prepared: Prepared,
        texts: Sequence[str],
        *,
        delivery: Delivery = Delivery.QUEUE,  # never steers: every batch after the turn
    ) -> HandoffMode:
        return await _give(prepared, texts)

    async def after_hand_off(self, target: str, prepared: Prepared) -> None:
        return None

    def drain_ended(self, target: str) -> None:
        self._slots.close(target, Ask.READ)

    def stop(self) -> None:
        self._slots.close_all()


def _read(path: str, max_bytes: int) -> tuple[list[dict[str, Any]], bool]:
    """The entries of the file's last ``max_bytes``, and whether that was all of it."""
    size = os.stat(path).st_size
    return read_tail(path, max_bytes), size <= max_bytes


@dataclass(frozen=True, slots=True)
class ClaudeTranscript:
    """The entries read of a Claude Code transcript (the whole file: ``complete``)."""

    entries: list[dict[str, Any]]
    complete: bool

    @property
    def homes(self) -> Mapping[str, str | None]:
        return dict(envelope_homes(self.entries))

    def answers(self, where: Mapping[str, str]) -> dict[str, str]:
        return answers_in(self.entries, where)

    def turns(self, where: Mapping[str, str]) -> list[EndedTurn]:
        return ended_turns(self.entries, where, complete=self.complete)


class ClaudeTranscripts:
    """A Claude Code session's transcript: the JSONL file its hooks named, read by pigeond
    (which must be able to: the user's own daemon can; see docs/agents-other.md)."""

    def __init__(
        self,
        path_of: Callable[[str], Deferred[str | None]],
        in_thread: InThread[Any],
        clock: IReactorTime,
        reads: TranscriptReadWatch,
    ) -> None:
        """``path_of`` finds a session's transcript path (memory, then the database).  A read
        gets ``reads.deadline_s`` (a file on a hung network mount must not hold its
        messages silently) and is told to ``reads``; its thread cannot be stopped, so while
        one of a target is still running, the next read of it times out at once."""
        self._path_of = path_of
        self._in_thread = in_thread
        self._clock = clock
        self._reads = reads
        self._reading: set[str] = set()  # targets with a read still running in a thread

    async def read(self, target: str, limit: int | None) -> ClaudeTranscript:
        path = await self._path_of(target)
        if path is None:
            raise HandOffError(
                f"no transcript is known for {target} yet (its hooks name it)",
                kind=FailureKind.OUTAGE,
            )
        max_bytes = (
            MAX_READ_BYTES if limit is None else max(MIN_TAIL_BYTES, limit * TAIL_BYTES_PER_MESSAGE)
        )
        try:
            entries, complete = await within_deadline(
                self._clock, self._read_in_thread(target, path, max_bytes), self._reads.deadline_s
            )
        except ReadTimedOut as e:
            error = f"reading {target}'s transcript {path}: {e}"
            self._reads.timed_out(target, error)
            raise HandOffError(error, kind=FailureKind.OUTAGE) from e
        except OSError as e:
            raise HandOffError(
                f"cannot read {target}'s transcript {path}: {e.strerror or e}",
                kind=FailureKind.OUTAGE,
            ) from e
        self._reads.succeeded(target)
        return ClaudeTranscript(entries, complete)

    def _read_in_thread(
        self, target: str, path: str, max_bytes: int
    ) -> Deferred[tuple[list[dict[str, Any]], bool]]:
        """The read, in a thread; never a second one of ``target`` while one still runs."""
        if target in self._reading:
            return Deferred()  # never fires: this read times out as the one running did
        self._reading.add(target)
        read: Deferred[tuple[list[dict[str, Any]], bool]] = self._in_thread(
            lambda: _read(path, max_bytes)
        )

        def finished(result: object) -> object:
            self._reading.discard(target)
            return result

        return read.addBoth(finished)
