"""The delivery seam's contract, held by every runtime alike (pigeond/delivery/runtime.py):
whatever the runtime, a batch is the due head of the queue in priority then FIFO order,
bounded by batch_max, and recorded as handed off once taken."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from pigeond.storage import SwarmRepository
from tests.http_helpers import result_of
from tests.member_harness import CLAUDE, MCP, OPENCODE, Members, make_members

# How each runtime's target takes what is due now: the msg_ids it was given, in order.
Take = Callable[[Members], list[str]]


def _opencode_takes(m: Members) -> list[str]:
    m.arbiter.kick(OPENCODE)
    prompts = m.opencode.pending()
    m.opencode.succeed_all()
    return [i for p in prompts for i in p.msg_ids()]


def _claude_takes(m: Members) -> list[str]:
    return [str(i) for i in result_of(m.turn_end())["msg_ids"]]  # type: ignore[attr-defined]


def _mcp_takes(m: Members) -> list[str]:
    return [str(i) for i in result_of(m.wait(MCP))["msg_ids"]]  # type: ignore[attr-defined]


RUNTIMES: dict[str, tuple[str, Take]] = {
    "opencode": (OPENCODE, _opencode_takes),
    "claude": (CLAUDE, _claude_takes),
    "mcp": (MCP, _mcp_takes),
}


@pytest.fixture(params=sorted(RUNTIMES))
def runtime(request: pytest.FixtureRequest) -> tuple[str, Take]:
    return RUNTIMES[request.param]


@pytest.fixture
def m(repo: SwarmRepository, clock: Clock, tmp_path: Path) -> Members:
    members = make_members(repo, clock, tmp_path, batch_max=2)
    members.event("session_start")
    return members


def test_a_batch_is_the_due_head_urgent_first(m: Members, runtime: tuple[str, Take]) -> None:
    """Priority, then the order they were accepted in."""
    target, take = runtime
    low = m.send(target, priority="low")
    urgent = m.send(target, priority="urgent")
    assert take(m) == [urgent, low]


def test_a_batch_is_bounded_by_batch_max(m: Members, runtime: tuple[str, Take]) -> None:
    """Three due, batch_max 2: two now, the third in the next batch."""
    target, take = runtime
    ids = [m.send(target) for _ in range(3)]
    first = take(m)
    assert first == ids[:2]
    assert take(m) == ids[2:]


def test_what_is_taken_is_recorded_handed_off(m: Members, runtime: tuple[str, Take]) -> None:
    """A batch taken is handed_off in the database; nothing else moved."""
    target, take = runtime
    sent = m.send(target)
    other = m.send("ses_someone_else")
    assert take(m) == [sent]
    assert m.stored(sent).state == "handed_off"
    assert m.stored(other).state == "queued"
