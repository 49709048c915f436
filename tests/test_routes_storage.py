"""Routes in storage: which daemon's opencode has which session, on both backends."""

from __future__ import annotations

import pytest

from pigeond.storage import SwarmRepository

pytestmark = pytest.mark.both_backends

A, B = "host-a", "host-b"
URL_A, URL_B = "http://10.0.0.1:4096", "http://10.0.0.2:4096"
STALE_MS = 60_000


def test_a_session_seen_by_one_daemon_is_routed_to_it(repo: SwarmRepository) -> None:
    """The first daemon to see a session gets its route, with its opencode's URL."""
    assert repo.record_routes(["ses_x"], A, URL_A, 1000, STALE_MS) == ["ses_x"]
    route = repo.route_of("ses_x")
    assert route is not None and route.view() == {
        "session": "ses_x", "daemon": A, "opencode_url": URL_A, "last_seen": 1000,
    }  # fmt: skip


def test_a_fresh_route_is_not_taken_by_another_daemon(repo: SwarmRepository) -> None:
    """Another daemon seeing the same session (one opencode shared) leaves the route."""
    repo.record_routes(["ses_x"], A, URL_A, 1000, STALE_MS)
    assert repo.record_routes(["ses_x"], B, URL_B, 2000, STALE_MS) == []
    route = repo.route_of("ses_x")
    assert route is not None and (route.daemon, route.last_seen_at) == (A, 1000)


def test_a_stale_route_moves_to_the_daemon_that_sees_the_session(repo: SwarmRepository) -> None:
    """Not seen by its daemon for stale_ms, a route goes to the daemon that sees it now."""
    repo.record_routes(["ses_x"], A, URL_A, 1000, STALE_MS)
    assert repo.record_routes(["ses_x"], B, URL_B, 1000 + STALE_MS + 1, STALE_MS) == ["ses_x"]
    route = repo.route_of("ses_x")
    assert route is not None and (route.daemon, route.opencode_url) == (B, URL_B)


def test_a_daemon_refreshes_its_own_route(repo: SwarmRepository) -> None:
    """Seeing its own session again moves last_seen on."""
    repo.record_routes(["ses_x"], A, URL_A, 1000, STALE_MS)
    assert repo.record_routes(["ses_x"], A, URL_A, 5000, STALE_MS) == ["ses_x"]
    route = repo.route_of("ses_x")
    assert route is not None and route.last_seen_at == 5000


def test_only_its_own_daemon_drops_a_route(repo: SwarmRepository) -> None:
    """A daemon whose opencode lost the session drops its route, never another's."""
    repo.record_routes(["ses_x"], A, URL_A, 1000, STALE_MS)
    assert repo.drop_route("ses_x", B) is False
    assert repo.drop_route("ses_x", A) is True
    assert repo.route_of("ses_x") is None and repo.routes() == []
