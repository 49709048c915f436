"""Rows 1 and 2 of bench/abuse_table.py: connections that hold the daemon's sockets, a
slowloris trickle and idle connections past the open-files limit, with /health probed
meanwhile.
"""

from __future__ import annotations

import socket
import time

from bench.abuse_probes import (
    Probe,
    Row,
    Size,
    answered,
    limit_problems,
    probe,
    recovery,
    refusals,
    summary,
    tally,
    workdir,
)
from bench.harness import running
from testkit.daemon_process import DaemonProcess
from testkit.process_stats import hard_nofile, open_files_limit
from testkit.raw_http import Trickler, parse_responses

# -- 1. slowloris ---------------------------------------------------------------------------


def open_tricklers(port: int, count: int, into: list[Trickler]) -> int:
    """Open up to ``count`` trickling connections into ``into``, 100 at a time; the number
    that failed to connect."""
    failed = 0
    deadline = time.monotonic() + 60
    while len(into) + failed < count and time.monotonic() < deadline:
        for _ in range(min(100, count - len(into) - failed)):
            try:
                into.append(Trickler(port))
            except OSError:
                failed += 1
        time.sleep(0.02)
    return failed


def trickle_and_probe(port: int, tricklers: list[Trickler], seconds: int) -> list[Probe]:
    """Each second: a byte to every fifth trickler (each gets one every 5 s), then a probe."""
    probes = []
    for second in range(seconds):
        started = time.monotonic()
        for i, trickler in enumerate(tricklers):
            if i % 5 == second % 5:
                trickler.send_more()
            trickler.poll()
        probes.append(probe(port))
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    return probes


def trickler_outcome(trickler: Trickler) -> str:
    trickler.poll()
    statuses = [str(r.status) for r in parse_responses(trickler.received)]
    if statuses:
        return "+".join(statuses)
    return "closed unanswered" if trickler.closed else "open"


def row_slowloris(size: Size) -> Row:
    tricklers: list[Trickler] = []
    with workdir() as work:
        daemon = DaemonProcess(work, work / "p.db", opencode_url="", nofile=(1024, hard_nofile()))
        with running(daemon):
            try:
                began = time.monotonic()
                failed = open_tricklers(daemon.port, size.tricklers, tricklers)
                probes = trickle_and_probe(daemon.port, tricklers, size.trickle_s)
                healthy = recovery(daemon.port, probes, began)
                outcomes = tally([trickler_outcome(t) for t in tricklers])
            finally:
                for trickler in tricklers:
                    trickler.close()
            fds = open_files_limit(daemon.pid)
            log = limit_problems(daemon)
    return Row(
        "1",
        f"slowloris: {size.tricklers} connections, 1 byte each every 5 s, {size.trickle_s} s;"
        " daemon started with soft RLIMIT_NOFILE 1024, defaults (max_connections 512,"
        " request_timeout_s 30); GET /health once a second on a fresh connection",
        f"probes: {summary(probes, 1.0)}, errors: {refusals(probes)}; {healthy};"
        f" daemon's fd limit {fds}; tricklers: {outcomes},"
        f" {failed} failed to connect; {log}",
        "every probe answered within 1 s",
        answered(probes, 1.0),
    )


# -- 2. idle connections --------------------------------------------------------------------


def open_idle(port: int, count: int, into: list[socket.socket]) -> int:
    """Open up to ``count`` connections that send nothing; the number that failed."""
    failed = 0
    for i in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            failed += 1
            continue
        sock.setblocking(False)
        into.append(sock)
        if i % 100 == 99:
            time.sleep(0.02)
    return failed


def idle_outcome(sock: socket.socket) -> str:
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return "open"
    except OSError:
        return "reset"
    if not data:
        return "closed unanswered"
    statuses = [str(r.status) for r in parse_responses(data)]
    return "+".join(statuses) or "partial answer"


def probe_repeatedly(port: int, count: int, every_s: float) -> list[Probe]:
    probes = []
    for _ in range(count):
        started = time.monotonic()
        probes.append(probe(port))
        time.sleep(max(0.0, every_s - (time.monotonic() - started)))
    return probes


def row_idle(size: Size, fixed: bool) -> Row:
    hard = 1024 if fixed else hard_nofile()
    sockets: list[socket.socket] = []
    with workdir() as work:
        daemon = DaemonProcess(work, work / "p.db", opencode_url="", nofile=(1024, hard))
        with running(daemon):
            try:
                began = time.monotonic()
                failed = open_idle(daemon.port, size.idle, sockets)
                probes = probe_repeatedly(daemon.port, size.idle_probes, 0.1)
                outcomes = tally([idle_outcome(s) for s in sockets])
                healthy = recovery(daemon.port, probes, began)
            finally:
                for sock in sockets:
                    sock.close()
            fds = open_files_limit(daemon.pid)
            log = limit_problems(daemon)
    how = "soft and hard 1024 (cannot be raised)" if fixed else f"soft 1024, hard {hard}"
    return Row(
        "2b" if fixed else "2a",
        f"{size.idle} idle TCP connections (send nothing), open-files limit {how}, defaults;"
        f" {size.idle_probes} GET /health probes 0.1 s apart",
        f"probes: {summary(probes, 1.0)}, errors: {refusals(probes)}; {healthy};"
        f" daemon's fd limit {fds}; the idle connections: {outcomes}, {failed} failed to"
        f" connect; {log}",
        "all probes answered (no resets)",
        answered(probes, 1.0),
    )
