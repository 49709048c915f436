"""What every brake is, and how the send path asks them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pigeond.config import Config
from pigeond.model import Hold, NewMessage


class Brake(Protocol):
    """One judge of sends (the hop brake, the pair brakes, the budget)."""

    def configure(self, config: Config) -> None:
        """A reload's settings (its option; 0 turns it off), from the next send on."""
        ...

    async def judge(self, message: NewMessage, thread_id: str, now_ms: int) -> Hold | None:
        """Hold ``message`` (to be accepted into ``thread_id`` at ``now_ms``) for a person,
        or let it go (None).  Reads only; what it counts is counted by the accept."""
        ...


class PersonPrompts(Protocol):
    """When a person last prompted a session themselves, read from its transcript."""

    async def last_person_prompt(self, session: str) -> int | None:
        """Milliseconds since the epoch of the newest user message in ``session``'s
        transcript that is not a swarm envelope; None when there is none, or it cannot
        be known (another runtime, a transcript that cannot be read now)."""
        ...


async def first_hold(
    brakes: Sequence[Brake], message: NewMessage, thread_id: str, now_ms: int
) -> Hold | None:
    """Ask each brake in order; the first hold wins and the rest are not asked."""
    for brake in brakes:
        hold = await brake.judge(message, thread_id, now_ms)
        if hold is not None:
            return hold
    return None
