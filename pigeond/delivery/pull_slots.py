"""Sessions asking for their next batch now: the hand-off of a runtime that is *asked*.

A Claude Code session is not pushed to: its Stop hook asks at each turn end
(``POST /swarm/agent/claude/turn-end``), its channel asks while it is idle
(``POST /swarm/agent/wait``), and an MCP-only member asks when it reads.  Each ask is a
:class:`PullSlot`: the request waits on it, the target's drain runs as for any runtime
(one batch in flight, priority then FIFO, the bounds, the intent, the record), and the
batch it hands off is the answer.  A drain that ends without one answers a turn end's
or a read's ask with nothing at once (the session stops, the read shows nothing new); a
channel's ask waits on, up to its own bound.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from twisted.internet.defer import Deferred

_OPENING_MSG_ID = re.compile(r'^<swarm_message [^>]*\bmsg_id="([^"]*)"')


class Ask(Enum):
    """Why a session asks, in the order a hand-off takes them."""

    TURN_END = "turn_end"  # its turn ended (a Stop hook): the batch runs one more turn
    READ = "read"  # it reads its inbox (an MCP-only member's swarm_read)
    IDLE = "idle"  # it is idle and listens (a Claude Code channel): pushed at once


@dataclass(frozen=True, slots=True)
class Handed:
    """The batch an ask is answered with: the envelopes as one text, and their ids."""

    text: str
    msg_ids: tuple[str, ...]

    @classmethod
    def of(cls, texts: Sequence[str]) -> Handed:
        ids = tuple(m.group(1) for t in texts if (m := _OPENING_MSG_ID.match(t)) is not None)
        return cls("\n\n".join(texts), ids)

    def view(self) -> dict[str, object]:
        return {"text": self.text, "msg_ids": list(self.msg_ids)}


NOTHING: dict[str, object] = {"text": None, "msg_ids": []}


@dataclass(eq=False)
class PullSlot:
    """One ask, answered once: with a batch, or with None (nothing now)."""

    target: str
    ask: Ask
    answer: Deferred[Handed | None] = field(default_factory=Deferred)

    @property
    def open(self) -> bool:
        return not self.answer.called

    def give(self, handed: Handed | None) -> bool:
        """Answer the ask; False when it was answered already (it timed out, or left)."""
        if self.answer.called:
            return False
        self.answer.callback(handed)
        return True


class PullSlots:
    """The open asks, at most one of each kind per target."""

    def __init__(self) -> None:
        self._slots: dict[tuple[str, Ask], PullSlot] = {}

    def open(self, target: str, ask: Ask) -> PullSlot:
        """A new ask; an older one of the same kind for ``target`` is answered with nothing
        (a second channel listener replaces the first)."""
        self.close(target, ask)
        slot = PullSlot(target, ask)
        self._slots[(target, ask)] = slot
        slot.answer.addBoth(self._forget, slot)
        return slot

    def _forget(self, result: object, slot: PullSlot) -> object:
        if self._slots.get((slot.target, slot.ask)) is slot:
            del self._slots[(slot.target, slot.ask)]
        return result

    def first(self, target: str, asks: Sequence[Ask]) -> PullSlot | None:
        """The first open ask of ``target`` among ``asks``, in that order."""
        for ask in asks:
            slot = self._slots.get((target, ask))
            if slot is not None and slot.open:
                return slot
        return None

    def close(self, target: str, ask: Ask) -> None:
        """Answer ``target``'s ask of this kind with nothing, if one is open."""
        slot = self._slots.get((target, ask))
        if slot is not None:
            slot.give(None)

    def close_all(self) -> None:
        for slot in list(self._slots.values()):
            slot.give(None)
