"""/health right after a slowloris flood (issue 27, measurement 8), measured from outside.

    .venv/bin/python -m bench.health_after_flood [--flood 1100] [--probes 40] [--gap 0.05]

Starts a pigeond subprocess with a fixed open-files limit of 1024 (soft and hard), opens
``--flood`` connections at once (non-blocking connects, each sending the start of a
request it never finishes), then probes ``GET /health`` ``--probes`` times on fresh
connections, ``--gap`` seconds apart.  Prints each probe's status and latency, how many
were not a 200, and the slowest; the tests assert no timing (docs/development.md).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import resource
import socket
import time

from bench.harness import machine_line, running, scratch_dir
from testkit.daemon_process import DaemonProcess
from testkit.raw_http import health_probe

HEAD_START = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
Probe = tuple[float, int | None, float]  # seconds after the flood began, status, ms


def flood_and_probe(port: int, flood_size: int, count: int, gap_s: float) -> list[Probe]:
    """Open ``flood_size`` connections that never finish a request, then probe /health
    ``count`` times, ``gap_s`` apart; the flood is closed after."""
    flood = []
    try:
        started = time.monotonic()
        for _ in range(flood_size):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            flood.append(sock)
        for sock in flood:
            with contextlib.suppress(OSError):
                sock.send(HEAD_START)
        probes = []
        for _ in range(count):
            response, latency = health_probe(port, timeout_s=10.0)
            at = time.monotonic() - started
            probes.append((round(at, 2), None if response is None else response.status,
                           round(latency * 1000, 1)))  # fmt: skip
            time.sleep(gap_s)
        return probes
    finally:
        for sock in flood:
            sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=1100)
    parser.add_argument("--probes", type=int, default=40)
    parser.add_argument("--gap", type=float, default=0.05)
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.flood + 1024), hard))
    with scratch_dir("flood") as work:
        daemon = DaemonProcess(work, work / "p.db", opencode_url="", nofile=(1024, 1024))
        with running(daemon):
            probes = flood_and_probe(daemon.port, args.flood, args.probes, args.gap)
    print(machine_line())
    print("probes (s after the flood began, status, ms):", probes)
    statuses = collections.Counter(status for _, status, _ in probes)
    not_ok = [p for p in probes if p[1] != 200]
    print(
        f"statuses {dict(statuses)}; not 200: {len(not_ok)} of {len(probes)}, the last at"
        f" {not_ok[-1][0] if not_ok else '-'} s; slowest {max(p[2] for p in probes)} ms"
    )


if __name__ == "__main__":
    main()
