"""Right after a slowloris flood, /health answers at once (issue 27, measurement 8).

At a fixed limit of 1024 descriptors, 1,100 connections that send the start of a request
and nothing more fill every slot within a fraction of a second; none of them has waited
EVICT_AFTER_S yet, so a probe right after used to get ``503 too many connections`` for up
to a second (a monitor retrying took over one).  On probation (``PROBATION_S``), a
probe's whole request takes the place of the connection waiting longest."""

from __future__ import annotations

import contextlib
import resource
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.daemon_process import DaemonFactory
from testkit.polling import PATIENCE_S
from testkit.raw_http import health_probe

FLOOD = 1100  # slowloris connections, more than a 1024-descriptor limit could hold
FLOOD_PROBES = 10
HEAD_START = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # and never the blank line


@pytest.fixture
def descriptors_for_the_flood() -> Iterator[None]:
    """This test process holds the flood's sockets: its soft open-files limit raised for
    the test (to the hard limit, at most what it needs), then put back."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = FLOOD + 512
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard open-files limit {hard} is too low for this test")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_flood(port: int, count: int) -> list[socket.socket]:
    """``count`` connections begun at once (non-blocking), each sending the start of a
    request it never finishes once connected."""
    flood = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        flood.append(sock)
    return flood


@pytest.mark.slow
@pytest.mark.usefixtures("descriptors_for_the_flood")
def test_health_is_answered_right_after_a_slowloris_flood(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    """At a fixed limit of 1024 descriptors, right after 1,100 slowloris connects, every
    one of ten /health probes is answered 200 while the flood still holds every slot (its
    request deadline is 30 s away): none gets a 503, none is closed unanswered."""
    daemon = daemons.start(tmp_path / "p.db", opencode_url="", nofile=(1024, 1024))
    flood = open_flood(daemon.port, FLOOD)
    try:
        for sock in flood:
            with contextlib.suppress(OSError):
                sock.send(HEAD_START)
        probes = [health_probe(daemon.port, timeout_s=PATIENCE_S)[0] for _ in range(FLOOD_PROBES)]
        statuses = [None if r is None else r.status for r in probes]
        print("probe statuses:", statuses)
        assert statuses == [200] * FLOOD_PROBES
    finally:
        for sock in flood:
            sock.close()
    assert "EMFILE" not in daemon.output()
