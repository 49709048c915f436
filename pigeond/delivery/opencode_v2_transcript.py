"""What an opencode 2.x transcript (``GET /api/session/{id}/message``) shows pigeond:
where each envelope came in, which turn read it, and whether that turn answered.

A 2.x transcript is a flat list, oldest first, of ``user`` (and ``synthetic``) inputs,
each with its ``text``, and ``assistant`` messages with their ``content`` parts and
``finish``.  An input is written when a turn reads it, so a turn is a run of inputs
followed by the assistant messages that answer them (two steers read together are one
turn; queued inputs are a turn each).  A steer read in the middle of a turn (at a step
boundary) is written after that turn's steps so far, and belongs to it: an input begins
a turn only once the one before has ended.  The protocol also writes an ``idle`` marker when
the session goes idle ("every step since the previous marker belongs to one turn"):
where there is one, it ends the turn too.  A turn has ended once an assistant message of
it is completed with a finish that stops the loop (not ``tool-calls``), or at its idle
marker; it *answered* when its last assistant message has no error and some text.
Taken from the protocol's message types and the stand-in built from them; no real 2.x
server has been read.

pigeond hands off a batch as one input, its envelopes joined by blank lines, so an
envelope is found at the start of any line of an input's text (a payload is escaped and
can never begin a line with a tag).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pigeond.costs import EndedTurn, usage_sum
from pigeond.delivery.answers import TURN_GOES_ON, has_text
from pigeond.delivery.opencode_usage import message_usage

ENVELOPE_AT_LINE_START = re.compile(r'^<swarm_message [^>]*\bmsg_id="([^"]*)"', re.MULTILINE)
INPUT_TYPES = ("user", "synthetic")


@dataclass(slots=True)
class _Turn:
    """The inputs a turn read and the assistant messages it wrote, oldest first."""

    inputs: list[str] = field(default_factory=list)
    steps: list[Mapping[str, Any]] = field(default_factory=list)
    idle: bool = False  # the session's idle marker closed it

    @property
    def ended(self) -> bool:
        if self.idle:
            return True
        return bool(self.steps) and (bool(self.steps[-1].get("error")) or _stops(self.steps[-1]))

    @property
    def answer(self) -> str | None:
        """The id of the assistant message that ended the turn with words, if it did."""
        if not self.ended or not self.steps:
            return None
        last = self.steps[-1]
        answer_id = last.get("id")
        if last.get("error") or not _stops(last) or not isinstance(answer_id, str):
            return None
        return answer_id if has_text(last.get("content")) else None


def _stops(step: Mapping[str, Any]) -> bool:
    """An assistant message completed with a finish that ends the loop."""
    time = step.get("time")
    finish = step.get("finish")
    completed = isinstance(time, dict) and time.get("completed") is not None
    return completed and isinstance(finish, str) and finish not in TURN_GOES_ON


def _turns(messages: Sequence[Mapping[str, Any]]) -> list[_Turn]:
    turns: list[_Turn] = []
    for message in messages:
        kind, message_id = message.get("type"), message.get("id")
        if kind in INPUT_TYPES and isinstance(message_id, str):
            if not turns or turns[-1].ended:  # else read together, or a steer mid-turn
                turns.append(_Turn())
            turns[-1].inputs.append(message_id)
        elif kind == "assistant":
            if not turns or turns[-1].idle:
                turns.append(_Turn())  # the read began inside a turn
            turns[-1].steps.append(message)
        elif kind == "idle" and turns:
            turns[-1].idle = True
    return turns


def begins_a_turn(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``messages`` (oldest first) show a turn begin: they begin with the
    session's idle marker or a step that ended its turn, and go on past it (the turns
    after it are whole).  An input first is not enough: it may be a steer read in the
    middle of a turn whose steps came before it."""
    if not messages:
        return True
    first = messages[0]
    ended = first.get("type") == "idle" or (
        first.get("type") == "assistant" and _Turn(steps=[first]).ended
    )
    return ended and len(messages) > 1


def envelope_homes_v2(messages: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """msg_id → the id of the input whose text carries its envelope at a line's start."""
    homes: dict[str, str | None] = {}
    for message in messages:
        text, message_id = message.get("text"), message.get("id")
        if message.get("type") in INPUT_TYPES and isinstance(text, str):
            home = message_id if isinstance(message_id, str) else None
            homes.update(dict.fromkeys(ENVELOPE_AT_LINE_START.findall(text), home))
    return homes


@dataclass(frozen=True, slots=True)
class OpencodeV2Transcript:
    """Messages of a 2.x transcript, newest ``limit`` (all: ``complete``), oldest first."""

    messages: list[dict[str, Any]]
    complete: bool

    @property
    def homes(self) -> Mapping[str, str | None]:
        return envelope_homes_v2(self.messages)

    def answers(self, where: Mapping[str, str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for turn in _turns(self.messages):
            answer = turn.answer
            if answer is not None:
                found.update({m: answer for m, home in where.items() if home in turn.inputs})
        return found

    def turns(self, where: Mapping[str, str]) -> list[EndedTurn]:
        ended = []
        for number, turn in enumerate(_turns(self.messages)):
            msg_ids = tuple(sorted(m for m, home in where.items() if home in turn.inputs))
            if not msg_ids or not turn.ended:
                continue
            usage = usage_sum(message_usage(step) for step in turn.steps)
            partial = not self.complete and number == 0
            ended.append(EndedTurn(turn.inputs[0], msg_ids, usage, partial))
        return ended
