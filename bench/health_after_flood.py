"""/health right after a slowloris flood (issue 27, measurement 8), measured from outside.

    .venv/bin/python bench/health_after_flood.py [--flood 1100] [--probes 40] [--gap 0.05]

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
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.daemon_process import DaemonProcess
from tests.raw_http import health_probe

HEAD_START = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=1100)
    parser.add_argument("--probes", type=int, default=40)
    parser.add_argument("--gap", type=float, default=0.05)
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.flood + 1024), hard))
    with tempfile.TemporaryDirectory() as tmp:
        daemon = DaemonProcess(Path(tmp), Path(tmp) / "p.db", opencode_url="",
                               nofile=(1024, 1024)).start()  # fmt: skip
        flood = []
        try:
            started = time.monotonic()
            for _ in range(args.flood):
                sock = socket.socket()
                sock.setblocking(False)
                sock.connect_ex(("127.0.0.1", daemon.port))
                flood.append(sock)
            for sock in flood:
                with contextlib.suppress(OSError):
                    sock.send(HEAD_START)
            probes = []
            for _ in range(args.probes):
                response, latency = health_probe(daemon.port, timeout_s=10.0)
                at = time.monotonic() - started
                probes.append((round(at, 2), None if response is None else response.status,
                               round(latency * 1000, 1)))  # fmt: skip
                time.sleep(args.gap)
        finally:
            for sock in flood:
                sock.close()
            daemon.stop()
    print("probes (s after the flood began, status, ms):", probes)
    statuses = collections.Counter(status for _, status, _ in probes)
    not_ok = [p for p in probes if p[1] != 200]
    print(
        f"statuses {dict(statuses)}; not 200: {len(not_ok)} of {len(probes)}, the last at"
        f" {not_ok[-1][0] if not_ok else '-'} s; slowest {max(p[2] for p in probes)} ms"
    )


if __name__ == "__main__":
    main()
