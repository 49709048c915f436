"""Connections are bounded and cannot be held open for free: a whole-request deadline that
trickling cannot extend (408), a cap on connections at once (503), a listen backlog for
bursts, and an open-files limit raised to the hard limit."""

from __future__ import annotations

import resource
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.web.server import Site

from pigeond.api.connection_slots import (
    EVICT_AFTER_S,
    MIN_REFUSALS_OPEN,
    PROBATION_S,
    RESERVED_FDS,
)
from pigeond.api.routes import SwarmRoutes
from pigeond.api.site_limits import LimitedSite
from pigeond.api.web import JsonApi, JsonResponse, configure_site, make_site
from pigeond.config import Config
from pigeond.service.listeners import LISTEN_BACKLOG, with_default_backlog
from pigeond.service.rlimits import UNLIMITED_NOFILE, raise_open_files_limit
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.polling import PATIENCE_S, wait_until
from testkit.process_stats import hard_nofile, open_files_limit
from testkit.raw_http import (
    PEER,
    Connection,
    Response,
    Trickler,
    health_probe,
    parse_responses,
)
from tests.storage_helpers import clock_daemon, repo_of

HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
HEAD_START = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def limited_site(
    repo: SwarmRepository,
    clock: Clock,
    *,
    request_timeout_s: float = 30,
    idle_timeout_s: float = 60,
    max_connections: int = 512,
) -> LimitedSite:
    api = SwarmRoutes(InlineDatabase(repo), clock, Config()).install(JsonApi())
    limits = Config(
        max_body_bytes=64 * 1024, request_timeout_s=request_timeout_s,
        max_connections=max_connections,
    )  # fmt: skip
    site = make_site(api, limits, idle_timeout_s, reactor=clock)
    assert isinstance(site, LimitedSite)
    return site


@pytest.fixture
def site(repo: SwarmRepository, clock: Clock) -> Site:
    return limited_site(repo, clock)


def only_response(connection: Connection) -> Response:
    [response] = connection.responses()
    return response


def is_408(connection: Connection) -> bool:
    responses = connection.responses()
    return (
        [r.status for r in responses] == [408] and responses[0].is_json_error and connection.closing
    )


# -- the whole-request deadline ---------------------------------------------------------------


def test_silent_connection_gets_408_after_request_timeout(site: Site, clock: Clock) -> None:
    """A connection that sends nothing gets 408 JSON request_timeout_s after it opened."""
    connection = Connection(site)
    clock.advance(29.9)
    assert connection.output() == b"" and not connection.closing
    clock.advance(0.2)
    assert is_408(connection)
    assert "30 s" in only_response(connection).json()["error"]


def test_trickling_does_not_extend_the_deadline(site: Site, clock: Clock) -> None:
    """One byte a second keeps the idle timeout at bay but not the request deadline."""
    connection = Connection(site)
    connection.send(HEAD_START + b"X-Slow: ")
    for _ in range(29):
        clock.advance(1)
        connection.send(b"a")
    assert connection.output() == b""
    clock.advance(1)
    assert is_408(connection)


def test_slow_body_is_cut_too(site: Site, clock: Clock) -> None:
    """The deadline covers the body: headers in time and a trickled body still get 408."""
    connection = Connection(site)
    connection.send(
        b"POST /swarm/send HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n{"
    )
    for _ in range(30):
        clock.advance(1)
        connection.send(b" ")
    assert is_408(connection)


def test_request_in_time_is_answered_and_not_cut(site: Site, clock: Clock) -> None:
    """A request that arrives whole just before the deadline is answered, with no 408 after."""
    connection = Connection(site)
    clock.advance(29)
    connection.send(HEALTH)
    clock.advance(31)
    assert [r.status for r in connection.responses()] == [200]


def test_next_request_deadline_starts_at_its_first_byte(site: Site, clock: Clock) -> None:
    """On a kept-alive connection, each request's clock starts with its own first byte."""
    connection = Connection(site)
    connection.send(HEALTH)
    clock.advance(50)  # idle, under the 60 s idle timeout
    connection.send(b"GET /hea")
    clock.advance(29.9)
    assert [r.status for r in connection.responses()] == [200]
    clock.advance(0.2)
    assert [r.status for r in connection.responses()] == [200, 408]


@pytest.mark.parametrize("rest", [b"GET /hea", HEAD_START], ids=["part-line", "whole-lines"])
def test_request_pipelined_behind_answered_ones_is_timed_too(
    site: Site, clock: Clock, rest: bytes
) -> None:
    """Two whole requests and the start of a third in one read: both are answered, and the
    third's deadline runs from that read, though no byte follows."""
    connection = Connection(site)
    connection.send(HEALTH + HEALTH + rest)
    clock.advance(29.9)
    assert [r.status for r in connection.responses()] == [200, 200]
    clock.advance(0.2)
    assert [r.status for r in connection.responses()] == [200, 200, 408]


def test_idle_kept_alive_connection_is_closed_silently(site: Site, clock: Clock) -> None:
    """Between requests only the idle timeout runs; it closes without an answer."""
    connection = Connection(site)
    connection.send(HEALTH)
    clock.advance(59.9)
    assert not connection.closing
    clock.advance(0.2)
    assert [r.status for r in connection.responses()] == [200] and connection.closing


def test_stalled_request_under_a_short_idle_timeout_gets_408(
    repo: SwarmRepository, clock: Clock
) -> None:
    """When the idle timeout strikes in the middle of a request, the client still hears 408."""
    connection = Connection(limited_site(repo, clock, idle_timeout_s=5))
    connection.send(HEAD_START)
    clock.advance(5)
    assert is_408(connection) and "stalled" in only_response(connection).json()["error"]


def test_client_that_never_reads_a_refusal_is_aborted(site: Site, clock: Clock) -> None:
    """After a 408 the connection is closed; if it has not gone in 5 s, it is aborted."""
    connection = Connection(site)
    clock.advance(30)
    assert is_408(connection) and not connection.aborted
    clock.advance(5)
    assert connection.aborted


# -- the connection cap ---------------------------------------------------------------------------


def test_connection_beyond_the_cap_gets_503_and_is_closed(
    repo: SwarmRepository, clock: Clock
) -> None:
    """With max_connections 2, a third connection that sends no request within PROBATION_S
    gets 503 too many connections, and a close."""
    site = limited_site(repo, clock, max_connections=2)
    Connection(site), Connection(site)
    third = Connection(site)
    assert third.responses() == []
    clock.advance(PROBATION_S)
    response = only_response(third)
    assert (response.status, response.json()) == (503, {"error": "too many connections"})
    assert response.headers["content-type"].startswith("application/json") and third.closing


def test_at_the_cap_the_longest_waiting_connection_makes_room(
    repo: SwarmRepository, clock: Clock
) -> None:
    """At the cap, a new connection is served once the oldest one has waited a second for a
    request; that one gets a 503 JSON and a close."""
    site = limited_site(repo, clock, max_connections=2)
    oldest, younger = Connection(site), Connection(site)
    clock.advance(EVICT_AFTER_S)
    newcomer = Connection(site)
    newcomer.send(HEALTH)
    assert only_response(newcomer).status == 200
    response = only_response(oldest)
    assert response.status == 503 and "make room" in response.json()["error"]
    assert oldest.closing and younger.responses() == [] and not younger.closing


def test_a_trickling_request_makes_room_too(repo: SwarmRepository, clock: Clock) -> None:
    """A request still trickling in after a second is cut for a newcomer: trickling buys no
    slot for longer."""
    site = limited_site(repo, clock, max_connections=1)
    trickler = Connection(site)
    for _ in range(4):
        trickler.send(b"G")
        clock.advance(EVICT_AFTER_S / 4)
    newcomer = Connection(site)
    newcomer.send(HEALTH)
    assert only_response(newcomer).status == 200
    assert only_response(trickler).status == 503 and trickler.closing


def test_fresh_connections_are_not_cut(repo: SwarmRepository, clock: Clock) -> None:
    """A connection younger than a second keeps its slot: the newcomer gets the 503."""
    site = limited_site(repo, clock, max_connections=1)
    held = Connection(site)
    clock.advance(EVICT_AFTER_S / 2)
    refused = Connection(site)
    clock.advance(PROBATION_S)
    assert only_response(refused).status == 503 and not held.closing


def test_a_whole_request_on_probation_takes_the_longest_waiting_place(
    repo: SwarmRepository, clock: Clock
) -> None:
    """At the cap with every connection younger than EVICT_AFTER_S (right after a flood),
    a newcomer whose whole request comes at once is answered: the connection that has
    waited longest for a request gives up its place with a 503."""
    site = limited_site(repo, clock, max_connections=2)
    oldest, younger = Connection(site), Connection(site)
    oldest.send(HEAD_START)
    newcomer = Connection(site)
    newcomer.send(HEALTH)
    assert only_response(newcomer).status == 200
    response = only_response(oldest)
    assert response.status == 503 and "make room" in response.json()["error"]
    assert younger.responses() == [] and not younger.closing
    assert (site.slots.open_connections, site.slots.refusals_open) == (2, 1)


def test_a_request_after_the_probation_is_refused(repo: SwarmRepository, clock: Clock) -> None:
    """A newcomer whose request comes only after PROBATION_S got its 503 already."""
    site = limited_site(repo, clock, max_connections=1)
    held = Connection(site)
    late = Connection(site)
    clock.advance(PROBATION_S)
    late.send(HEALTH)
    assert [r.status for r in late.responses()] == [503] and not held.closing


def test_a_newcomer_displaces_the_oldest_probation(repo: SwarmRepository, clock: Clock) -> None:
    """With as many probations as a quarter of the refusals allows, a newcomer takes the
    oldest one's place: that one is closed at once, and the newcomer's whole request is
    answered."""
    site = limited_site(repo, clock, max_connections=1)
    site.slots.max_refusals_open = 8
    assert site.slots.probations_allowed(8) == 2
    Connection(site)
    first, second = Connection(site), Connection(site)
    newcomer = Connection(site)
    assert first.responses() == [] and first.aborted and second.responses() == []
    newcomer.send(HEALTH)
    assert only_response(newcomer).status == 200


def test_a_connection_being_answered_is_never_cut(clock: Clock) -> None:
    """A request whose answer is still being made keeps its connection, however long."""
    api = JsonApi()

    async def never(request: Any) -> JsonResponse:
        await Deferred()
        raise AssertionError("unreachable")

    api.route("GET", "/slow", never)
    site = make_site(
        api, Config(max_body_bytes=1024, request_timeout_s=30, max_connections=1), reactor=clock
    )
    busy = Connection(site)
    busy.send(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    clock.advance(10 * EVICT_AFTER_S)
    refused = Connection(site)
    refused.send(HEALTH)  # a whole request: it would take a waiting connection's place
    assert only_response(refused).status == 503 and not busy.closing


def test_an_evicted_connection_frees_only_its_own_slot(repo: SwarmRepository, clock: Clock) -> None:
    """The slot a connection gives up for a newcomer is not given back twice when it closes."""
    site = limited_site(repo, clock, max_connections=1)
    old = Connection(site)
    clock.advance(EVICT_AFTER_S)
    Connection(site)
    old.close()
    assert site.slots.open_connections == 1 and site.slots.refusals_open == 0


def test_closing_a_connection_frees_its_slot(repo: SwarmRepository, clock: Clock) -> None:
    """Once a connection closes, the next one is served."""
    site = limited_site(repo, clock, max_connections=2)
    first, _ = Connection(site), Connection(site)
    first.close()
    connection = Connection(site)
    connection.send(HEALTH)
    assert only_response(connection).status == 200


def test_refused_connection_takes_no_slot(repo: SwarmRepository, clock: Clock) -> None:
    """A connection answered 503 is not counted, before or after it closes."""
    site = limited_site(repo, clock, max_connections=1)
    held = Connection(site)
    refused = Connection(site)
    refused.close()
    held.close()
    connection = Connection(site)
    connection.send(HEALTH)
    assert only_response(connection).status == 200


def test_flood_beyond_the_open_refusals_is_closed_unanswered(
    repo: SwarmRepository, clock: Clock
) -> None:
    """While as many refusals as allowed are still being written (probations among them),
    one more connection is closed at once (no protocol at all), so a connect flood cannot
    pile up descriptors."""
    site = limited_site(repo, clock, max_connections=1)
    site.slots.max_refusals_open = 8
    Connection(site)
    refusals = [Connection(site) for _ in range(8)]
    assert site.buildProtocol(PEER) is None
    refusals[0].close()
    assert site.buildProtocol(PEER) is not None


def test_refusals_allowed_follow_the_open_files_limit(repo: SwarmRepository, clock: Clock) -> None:
    """What the open-files limit leaves beside max_connections and a reserve may be refused."""
    site = limited_site(repo, clock, max_connections=100)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    allowed = site.slots.refusals_allowed()
    assert allowed == max(MIN_REFUSALS_OPEN, soft - 100 - RESERVED_FDS)


def test_connection_cut_by_the_deadline_frees_its_slot(repo: SwarmRepository, clock: Clock) -> None:
    """A slow client loses its slot at the deadline, once its connection is gone."""
    site = limited_site(repo, clock, max_connections=1)
    slow = Connection(site)
    clock.advance(30)
    slow.close()  # what the transport does after the 408 is written
    connection = Connection(site)
    connection.send(HEALTH)
    assert only_response(connection).status == 200


def test_configure_site_applies_new_limits_live(site: Site, clock: Clock) -> None:
    """A reload's deadline holds for the next request, its cap for the next connection."""
    held = Connection(site)
    configure_site(site, 64 * 1024, request_timeout_s=5, max_connections=1)
    beyond = Connection(site)
    clock.advance(PROBATION_S)
    assert only_response(beyond).status == 503
    held.send(HEALTH)
    held.send(b"GET /he")
    clock.advance(5)
    assert [r.status for r in held.responses()] == [200, 408]


def test_daemon_reload_applies_request_timeout_and_max_connections(
    tmp_path: Path, clock: Clock
) -> None:
    """SIGHUP's reload reaches the site: new deadline and cap, body limit kept working."""
    config = Config(db=str(tmp_path / "p.db"), opencode_url="", auth="none")
    daemon = clock_daemon(config, clock)
    daemon.reload(replace(config, request_timeout_s=2, max_connections=1, max_body_bytes=2048))
    first = Connection(daemon.site)
    beyond = Connection(daemon.site)
    clock.advance(PROBATION_S)
    assert only_response(beyond).status == 503
    clock.advance(2)
    assert is_408(first)
    repo_of(daemon).close()


# -- the listen backlog and the open-files limit ---------------------------------------------------


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("tcp:4097:interface=127.0.0.1", f"tcp:4097:interface=127.0.0.1:backlog={LISTEN_BACKLOG}"),
        ("tcp6:4097", f"tcp6:4097:backlog={LISTEN_BACKLOG}"),
        ("unix:/run/p.sock:mode=600", f"unix:/run/p.sock:mode=600:backlog={LISTEN_BACKLOG}"),
        ("tcp:4097:backlog=10", "tcp:4097:backlog=10"),
        ("systemd:domain=UNIX:index=0", "systemd:domain=UNIX:index=0"),
    ],
)
def test_listen_endpoints_get_a_backlog_for_bursts(listen: str, expected: str) -> None:
    """tcp and unix endpoints queue 1024 connects unless they say otherwise; systemd's
    sockets keep their unit's Backlog=."""
    assert with_default_backlog(listen) == expected


class FakeLimits:
    """getrlimit/setrlimit for RLIMIT_NOFILE, recording what is set."""

    def __init__(self, soft: int, hard: int, error: OSError | None = None) -> None:
        self.limits = (soft, hard)
        self.error = error
        self.calls: list[tuple[int, int]] = []

    def get(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.limits

    def set(self, which: int, limits: tuple[int, int]) -> None:
        self.calls.append(limits)
        if self.error is not None:
            raise self.error
        self.limits = limits


def test_soft_open_files_limit_is_raised_to_the_hard_limit() -> None:
    """A soft limit of 1024 under a hard one of 65536 becomes 65536."""
    fake = FakeLimits(1024, 65536)
    limit = raise_open_files_limit(fake.get, fake.set)
    assert fake.limits == (65536, 65536) and (limit.before, limit.now) == (1024, 65536)
    assert "65536 (raised from 1024)" in limit.describe()


def test_open_files_limit_already_at_the_hard_limit_is_left_alone() -> None:
    """Under the unit (LimitNOFILE= sets both) no setrlimit is attempted: the filter refuses it."""
    fake = FakeLimits(65536, 65536)
    assert raise_open_files_limit(fake.get, fake.set).now == 65536 and fake.calls == []


def test_unlimited_hard_limit_raises_to_a_finite_one() -> None:
    """The kernel refuses an infinite RLIMIT_NOFILE, so "unlimited" means 2**20."""
    fake = FakeLimits(1024, resource.RLIM_INFINITY)
    assert raise_open_files_limit(fake.get, fake.set).now == UNLIMITED_NOFILE


def test_failing_to_raise_the_limit_is_reported_not_raised() -> None:
    """EPERM from setrlimit leaves the limit as it was and says why."""
    fake = FakeLimits(1024, 4096, OSError(1, "Operation not permitted"))
    limit = raise_open_files_limit(fake.get, fake.set)
    assert limit.now == 1024 and "not permitted" in limit.describe()


# -- against a real daemon ------------------------------------------------------------------------

FEW_FDS = 256
TRICKLERS = 300  # more than FEW_FDS descriptors could hold
PROBES = 10
REQUEST_TIMEOUT_S = 2.0


@pytest.fixture
def tmp_nofile_ok() -> None:
    if hard_nofile() != resource.RLIM_INFINITY and hard_nofile() < TRICKLERS + 100:
        pytest.skip(f"the hard open-files limit {hard_nofile()} is too low for this test")


def open_tricklers(daemon: DaemonProcess, tricklers: list[Trickler], wave: int) -> None:
    """Open TRICKLERS connections into ``tricklers``, ``wave`` at a time, 20 ms apart."""
    while len(tricklers) < TRICKLERS:
        for _ in range(min(wave, TRICKLERS - len(tricklers))):
            tricklers.append(Trickler(daemon.port))
        time.sleep(0.02)  # the waves' pace


def slowloris(
    daemon: DaemonProcess, wave: int = TRICKLERS
) -> tuple[list[Trickler], list[tuple[float, Response | None]]]:
    """Open TRICKLERS connections (``wave`` at a time), feed each a byte every 0.5 s for
    ~5 s, and probe /health PROBES times meanwhile; the tricklers, and each probe's
    latency and answer."""
    tricklers: list[Trickler] = []
    probes = []
    try:
        open_tricklers(daemon, tricklers, wave)
        for _ in range(PROBES):
            started = time.monotonic()
            for trickler in tricklers:
                trickler.send()
                trickler.poll()
            response, latency = health_probe(daemon.port, timeout_s=1.0)
            probes.append((latency, response))
            time.sleep(max(0.0, 0.5 - (time.monotonic() - started)))  # the trickle's pace

        def all_cut() -> bool:  # a busy machine may cut the last ones a little late
            for trickler in tricklers:
                trickler.poll()
            return all(t.closed for t in tricklers)

        wait_until(all_cut, PATIENCE_S, "every trickler answered and closed", every_s=0.05)
    finally:
        for trickler in tricklers:
            trickler.close()
    return tricklers, probes


def start_for_slowloris(
    daemons: DaemonFactory, tmp_path: Path, nofile: tuple[int, int], *extra: str
) -> DaemonProcess:
    return daemons.start(
        tmp_path / "p.db", opencode_url="", nofile=nofile,
        extra_args=["--request-timeout-s", str(REQUEST_TIMEOUT_S), *extra],
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.usefixtures("tmp_nofile_ok")
def test_slowloris_beyond_the_fd_limit_leaves_health_answering(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    """Started with 256 descriptors, pigeond raises its limit, and under 300 trickling
    connections every /health probe gets 200 within 1 s."""
    daemon = start_for_slowloris(daemons, tmp_path, (FEW_FDS, hard_nofile()))
    assert open_files_limit(daemon.pid) > TRICKLERS + 100
    assert f"raised from {FEW_FDS}" in daemon.output()
    _, probes = slowloris(daemon)
    print("probe latencies (s):", [round(latency, 3) for latency, _ in probes])
    assert [r.status if r else None for _, r in probes] == [200] * PROBES
    assert max(latency for latency, _ in probes) < 1.0


@pytest.mark.slow
@pytest.mark.usefixtures("tmp_nofile_ok")
def test_trickler_is_cut_after_request_timeout_with_408(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    """Every trickling connection gets 408 JSON about request_timeout_s (2 s) after it
    opened, though it sent a byte every 0.5 s, and is closed."""
    daemon = start_for_slowloris(daemons, tmp_path, (FEW_FDS, hard_nofile()))
    tricklers, _ = slowloris(daemon)
    statuses = {r.status for t in tricklers for r in parse_responses(t.received)}
    assert statuses == {408} and all(t.closed for t in tricklers)
    cut_after = [t.answered_at - t.opened for t in tricklers if t.answered_at is not None]
    print(f"cut after {min(cut_after):.2f} to {max(cut_after):.2f} s")
    assert len(cut_after) == TRICKLERS
    assert min(cut_after) >= REQUEST_TIMEOUT_S - 0.1
    assert max(cut_after) < REQUEST_TIMEOUT_S + 1.5


@pytest.mark.slow
def test_slowloris_at_a_fixed_fd_limit_is_held_off_by_the_cap(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    """With 256 descriptors, soft and hard, and max_connections 120, 300 tricklers never
    exhaust the descriptors: every probe is answered within 1 s (its whole request takes
    a trickler's slot); each trickler is cut (408), refused (503) or, displaced from its
    probation by newer connections, closed unanswered."""
    daemon = start_for_slowloris(daemons, tmp_path, (FEW_FDS, FEW_FDS), "--max-connections", "120")
    assert open_files_limit(daemon.pid) == FEW_FDS
    tricklers, probes = slowloris(daemon, wave=20)
    print("probes (s, status):", [(round(t, 3), r.status if r else None) for t, r in probes])
    answers = [r for _, r in probes if r is not None]
    assert len(answers) == PROBES and max(latency for latency, _ in probes) < 1.0
    assert all(r.status == 200 or (r.status == 503 and r.is_json_error) for r in answers)
    assert answers[-1].status == 200
    statuses = sorted(r.status for t in tricklers for r in parse_responses(t.received))
    print(f"tricklers: {statuses.count(408)} x 408, {statuses.count(503)} x 503")
    assert set(statuses) <= {408, 503} and statuses.count(408) <= 120
    assert all(t.closed for t in tricklers)
    output = daemon.output()
    assert "EMFILE" not in output and "Could not accept" not in output


@pytest.mark.slow
def test_slowloris_holding_every_slot_cannot_keep_health_out(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    """With max_connections 50 and 120 tricklers that the 30 s deadline would keep for
    the whole test, /health is answered 200 once the tricklers have waited a second:
    a probe makes room by cutting the longest-waiting trickler with a 503."""
    daemon = daemons.start(
        tmp_path / "p.db", opencode_url="", extra_args=["--max-connections", "50"]
    )
    tricklers = [Trickler(daemon.port) for _ in range(120)]
    statuses = []
    try:
        for _ in range(8):
            time.sleep(0.5)  # the tricklers' pace; a slow machine only makes them older
            for trickler in tricklers:
                trickler.send()
            response, _ = health_probe(daemon.port, timeout_s=PATIENCE_S)
            statuses.append(response.status if response is not None else None)
        for trickler in tricklers:
            trickler.poll()
    finally:
        for trickler in tricklers:
            trickler.close()
    print("probe statuses:", statuses)
    assert statuses[3:] == [200] * 5  # from 2 s on, every probe
    cut = [r.json()["error"] for t in tricklers for r in parse_responses(t.received)]
    # beyond the cap from the start: refused after their probation, or displaced from it
    # (closed unanswered) by the newer ones
    unanswered = sum(1 for t in tricklers if t.closed and not parse_responses(t.received))
    assert cut.count("too many connections") + unanswered == 70
    # the probe that found every slot held cut one (its slot then serves the next probes)
    assert cut.count("closed to make room for a new connection (too many connections)") == 1


@pytest.mark.slow
def test_connect_flood_at_a_fixed_fd_limit_exhausts_no_descriptors(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    """300 connects at once to a daemon with 256 descriptors and max_connections 120:
    each is cut (408), refused (503) or, past the refusals the descriptors allow, closed
    unanswered; accept never fails for want of descriptors, and /health then answers."""
    daemon = start_for_slowloris(daemons, tmp_path, (FEW_FDS, FEW_FDS), "--max-connections", "120")
    tricklers: list[Trickler] = []
    try:
        open_tricklers(daemon, tricklers, TRICKLERS)

        def all_closed() -> bool:
            for trickler in tricklers:
                trickler.poll()
            return all(t.closed for t in tricklers)

        wait_until(all_closed, PATIENCE_S, "every connection cut or refused", every_s=0.05)
    finally:
        for trickler in tricklers:
            trickler.close()
    answers = [tuple(r.status for r in parse_responses(t.received)) for t in tricklers]
    counts = {a: answers.count(a) for a in set(answers)}
    print("tricklers' answers:", counts)
    assert set(counts) <= {(408,), (503,), ()} and all(t.closed for t in tricklers)
    assert counts.get((408,), 0) <= 120
    output = daemon.output()
    assert "EMFILE" not in output and "Could not accept" not in output
    response, _ = health_probe(daemon.port, timeout_s=PATIENCE_S)
    assert response is not None and response.status == 200


@pytest.mark.slow
def test_connection_cap_refuses_the_21st_and_frees_slots_on_close(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    """With max_connections 20, a 21st connection that sends no whole request gets 503
    JSON and a close once its probation is over; once the 20 close, /health on a fresh
    connection answers 200."""
    daemon = daemons.start(
        tmp_path / "p.db", opencode_url="", extra_args=["--max-connections", "20"]
    )
    held = [Trickler(daemon.port) for _ in range(20)]
    try:
        late = Trickler(daemon.port)
        held.append(late)

        def refused() -> bool:
            late.poll()
            return late.closed

        wait_until(refused, PATIENCE_S, "the 21st connection refused", every_s=0.05)
        [response] = parse_responses(late.received)
        assert response.is_json_error
        assert (response.status, response.json()) == (503, {"error": "too many connections"})
    finally:
        for trickler in held:
            trickler.close()

    def health_ok() -> bool:
        answer = health_probe(daemon.port)[0]
        return answer is not None and answer.status == 200

    wait_until(health_ok, PATIENCE_S, "a 200 after closing the 20", every_s=0.05)
