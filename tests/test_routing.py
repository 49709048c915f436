"""Routing on a database several daemons share: a daemon delivers only to the sessions
its opencode has, and asks about a target no more than it must."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.delivery.routing import MISS_S, STALE_S, Routing
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from tests.http_helpers import result_of

ME, OTHER = "host-a", "host-b"
URL = "http://127.0.0.1:4096"


@dataclass
class OurOpencode:
    """Which sessions our opencode has; counts the questions."""

    sessions: set[str] = field(default_factory=set)
    asked: list[str] = field(default_factory=list)

    def cached(self, session_id: str) -> bool:
        return False

    async def exists(self, session_id: str) -> bool | None:
        self.asked.append(session_id)
        return session_id in self.sessions


@pytest.fixture
def opencode() -> OurOpencode:
    return OurOpencode()


@pytest.fixture
def routing(repo: SwarmRepository, clock: Clock, opencode: OurOpencode) -> Routing:
    return Routing(InlineDatabase(repo), opencode, clock, ME, URL)


def mine(routing: Routing, target: str) -> bool:
    return bool(result_of(Deferred.fromCoroutine(routing.mine(target))))


def test_a_session_our_opencode_has_is_ours_and_routed_here(
    routing: Routing, opencode: OurOpencode, repo: SwarmRepository
) -> None:
    """Our opencode has it: ours, and its route names this daemon."""
    opencode.sessions.add("ses_x")
    assert mine(routing, "ses_x") is True
    route = repo.route_of("ses_x")
    assert route is not None and (route.daemon, route.opencode_url) == (ME, URL)


def test_another_daemon_s_fresh_route_is_not_ours_and_opencode_is_not_asked(
    routing: Routing, opencode: OurOpencode, repo: SwarmRepository, clock: Clock
) -> None:
    """A route another daemon refreshed lately: not ours, whatever our opencode says."""
    opencode.sessions.add("ses_x")
    repo.record_routes(["ses_x"], OTHER, "http://b", int(clock.seconds() * 1000), 1)
    assert mine(routing, "ses_x") is False
    assert opencode.asked == []


def test_a_stale_route_moves_here_when_our_opencode_has_the_session(
    routing: Routing, opencode: OurOpencode, repo: SwarmRepository, clock: Clock
) -> None:
    """Its daemon has not seen the session for STALE_S: ours, if our opencode has it."""
    opencode.sessions.add("ses_x")
    repo.record_routes(["ses_x"], OTHER, "http://b", int(clock.seconds() * 1000), 1)
    clock.advance(STALE_S + 1)
    assert mine(routing, "ses_x") is True
    route = repo.route_of("ses_x")
    assert route is not None and route.daemon == ME


def test_a_target_nobody_has_is_asked_about_once_per_miss_interval(
    routing: Routing, opencode: OurOpencode, clock: Clock
) -> None:
    """Not in our opencode: not ours, and not asked again every tick."""
    assert [mine(routing, "ses_typo") for _ in range(5)] == [False] * 5
    assert opencode.asked == ["ses_typo"]
    clock.advance(MISS_S + 0.1)
    assert mine(routing, "ses_typo") is False
    assert opencode.asked == ["ses_typo", "ses_typo"]


def test_sessions_seen_on_our_event_stream_are_routed_here(
    routing: Routing, repo: SwarmRepository
) -> None:
    """What our opencode shows is routed here without a question."""
    routing.seen(["ses_a", "ses_b"])
    assert [(r.session, r.daemon) for r in repo.routes()] == [("ses_a", ME), ("ses_b", ME)]
