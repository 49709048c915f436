"""Every route fuzzed in memory (hypothesis): requests built from what the API takes and what
it must refuse go through the daemon's own site (LimitedChannel, the gate, JsonApi, the
handlers, a real SQLite file), and every answer must be one the OpenAPI description
documents: never a 5xx, always JSON, never a traceback, and quick.

Runs are derandomized (the same examples every time, so a failure in ``make test``
reproduces) and bounded in count; each test writes its answers' counts by status to
``fuzz-counts.json`` in its temporary directory, and prints them.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.web.server import Site

from pigeond.api.access import AccessPolicy
from pigeond.api.flood import FloodGuard
from pigeond.api.routes import SwarmRoutes
from pigeond.api.web import JsonApi, make_site
from pigeond.config import Config
from pigeond.model import HandoffMode, NewMessage
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.database import InlineDatabase
from testkit.raw_http import Connection, Response, parse_responses
from tests.fixed_time import START_S
from tests.fuzz_strategies import (
    MSG_IDS,
    SENDERS,
    SESSIONS,
    FuzzRequest,
    authorised_sends,
    bounded,
    has_traceback,
    requests_to_routes,
)
from tests.openapi_check import check_body, expected_statuses

TOKEN = "f" * 43
MAX_BODY_BYTES = 64 * 1024
# an answer in memory slower than this is a hang in the making
MAX_ANSWER_S = 2.0


@dataclass
class FuzzSite:
    """The daemon's site in memory, with a seeded database, counting answers by status."""

    site: Site
    repo: SwarmRepository
    clock: Clock
    counts: Counter[int]

    def exchange(self, request: FuzzRequest) -> list[Response]:
        connection = Connection(self.site)
        started = time.monotonic()
        connection.send(request.to_bytes())
        elapsed = time.monotonic() - started
        raw = connection.output().replace(b"HTTP/1.1 100 Continue\r\n\r\n", b"")
        connection.close()
        self.clock.advance(0.25)  # the flood guard's buckets refill as time goes by
        assert elapsed < MAX_ANSWER_S, f"answered after {elapsed:.2f} s"
        responses = parse_responses(raw)
        self.counts.update(r.status for r in responses)
        return responses

    def stored(self) -> int:
        return sum(self.repo.count_by_state().values())

    def report(self, tmp_path: Path, name: str) -> None:
        counts = {str(status): n for status, n in sorted(self.counts.items())}
        (tmp_path / "fuzz-counts.json").write_text(json.dumps({name: counts}, indent=1))
        print(f"{name}: {sum(self.counts.values())} answers by status: {counts}")


@pytest.fixture
def fuzz(tmp_path: Path) -> Iterator[FuzzSite]:
    """Flood limits low enough to be reached; the inbox byte budget small enough to page."""
    repo = SwarmRepository(open_database(tmp_path / "fuzz.db"))
    clock = Clock()
    clock.advance(START_S)
    guard = FloodGuard(
        InlineDatabase(repo), clock, max_queued_per_target=10, sender_rate_per_s=1, sender_burst=5
    )
    routes = SwarmRoutes(
        InlineDatabase(repo),
        clock,
        Config(inbox_max_bytes=4096),
        admission=guard,
    )
    api = routes.install(JsonApi(gate=AccessPolicy(own_uid=os.getuid(), token=TOKEN)))
    seed_messages(repo, clock)
    yield FuzzSite(
        make_site(api, Config(max_body_bytes=MAX_BODY_BYTES), reactor=clock), repo, clock, Counter()
    )
    repo.close()


def seed_messages(repo: SwarmRepository, clock: Clock) -> None:
    """Messages in every shape an answer shows: queued, handed off with and without a
    model, verified, on a channel; so inbox pages and message answers have content."""
    now = int(clock.seconds() * 1000)
    for i, (target, sender) in enumerate(zip(SESSIONS * 3, SENDERS * 3, strict=True)):
        msg_id = MSG_IDS[i] if i < len(MSG_IDS) else f"msg_seed_{i}"
        repo.accept(
            NewMessage(msg_id, sender, target, None, "chat", "normal", None, f"hello {i} ✓"),
            now,
            now + 86_400_000,
        )
        if i % 3 != 2:
            mode = (
                HandoffMode("plan", "anthropic", "claude", None, None) if i % 2 else HandoffMode()
            )
            repo.mark_handed_off_many([msg_id], now + i, now + 60_000, mode)
    repo.accept(
        NewMessage("msg_channel", "bot-1", None, "news", "status.update", "low", "msg_1", "x"),
        now,
        None,
    )
    repo.mark_verified(["msg_seed_3"], now + 100)


def check_answer(request: FuzzRequest, response: Response) -> None:
    """A documented status, never a 5xx; JSON as documented; no traceback; the headers
    its status promises."""
    method = request.method.decode()
    assert response.status < 500, response
    assert response.status in expected_statuses(method, request.path), response
    assert response.headers.get("content-type", "").startswith("application/json"), response
    assert not has_traceback(response.body), response.body[:500]
    check_body(method, request.path, response.status, response.headers, response.body)
    promised = {401: "www-authenticate", 405: "allow", 429: "retry-after"}.get(response.status)
    assert promised is None or promised in response.headers, response


def test_no_request_to_any_route_gets_an_undocumented_answer(
    fuzz: FuzzSite, tmp_path: Path
) -> None:
    """Any method, path, query, gate header and body: a documented JSON answer, never a 5xx."""

    @bounded(1200)
    @given(request=requests_to_routes(TOKEN))
    def run(request: FuzzRequest) -> None:
        responses = fuzz.exchange(request)
        assert responses, f"no answer to {request.to_bytes()[:300]!r}"
        check_answer(request, responses[0])

    run()
    fuzz.report(tmp_path, "routes")
    assert fuzz.counts.keys() >= {200, 202, 400, 401, 404, 405, 409, 415, 421, 429}


def test_a_send_is_stored_exactly_when_answered_202(fuzz: FuzzSite, tmp_path: Path) -> None:
    """Fuzzed send bodies past the gate: stored (once) only on 202, else refused with a 4xx."""

    @bounded(600)
    @given(request=authorised_sends(TOKEN))
    def run(request: FuzzRequest) -> None:
        before = fuzz.stored()
        (response,) = fuzz.exchange(request)
        check_answer(request, response)
        assert response.status in {202, 400, 409, 413, 429}, response
        if response.status == 202:
            stored = fuzz.repo.get(response.json()["msg_id"])
            assert stored is not None and fuzz.stored() - before in {0, 1}
        else:
            assert fuzz.stored() == before

    run()
    fuzz.report(tmp_path, "sends")
    assert fuzz.counts.keys() >= {202, 400, 409, 429}


WRONG_AUTH = st.sampled_from([None, b"Bearer wrong", b"Basic " + TOKEN.encode(), b"Bearer"])


def test_without_the_token_no_handler_runs(fuzz: FuzzSite, tmp_path: Path) -> None:
    """Without the right token every request but GET /health is refused before routing:
    401 (or the gate's 421/403, or a framing 4xx), never a 404 that tells a route apart."""

    @bounded(500)
    @given(request=requests_to_routes(TOKEN), auth=WRONG_AUTH)
    def run(request: FuzzRequest, auth: bytes | None) -> None:
        headers = tuple(h for h in request.headers if h[0] != b"Authorization")
        if auth is not None:
            headers += ((b"Authorization", auth),)
        request = replace(request, headers=headers)
        before = fuzz.stored()
        (response,) = fuzz.exchange(request)
        check_answer(request, response)
        public = request.path == "/health" and request.method in (b"GET", b"HEAD")
        if not public:
            assert response.status in {400, 401, 403, 413, 414, 421, 431}, response
        assert fuzz.stored() == before

    run()
    fuzz.report(tmp_path, "no token")
    assert fuzz.counts.keys() >= {200, 401, 421}


@pytest.mark.parametrize("method", [b"OPTIONS", b"GET", b"DELETE"])
def test_a_request_for_star_passes_the_gate(fuzz: FuzzSite, method: bytes) -> None:
    """``OPTIONS *`` (and any method on ``*``) meets the gate like every request: without
    the token, a JSON 401 (found by this fuzzer: Twisted's Site answers ``*`` itself, an
    empty 200 or 405 that skips the gate and is not JSON)."""
    request = FuzzRequest(method, b"*", ((b"Host", b"127.0.0.1"),), b"")
    (response,) = fuzz.exchange(request)
    assert (response.status, response.is_json_error) == (401, True), response
