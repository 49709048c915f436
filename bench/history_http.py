"""HTTP for bench/history_table.py: a keep-alive client, pigeond on a database, a bare route.

    .venv/bin/python -m bench.history_http --serve-bare   # prints its port, serves until killed

The bare route is twisted.web with nothing of pigeond: one ``GET`` answering a small JSON
object, so the table can say what an HTTP round trip alone costs on the machine, timed by
the same client in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.harness import ROOT, bench_command, running
from testkit.daemon_process import DaemonProcess, stop_process

START_TIMEOUT_S = 60.0


class Client:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1, sending a bearer token as a client
    does.  ``http.client`` rather than urllib: no new connection and little Python per call."""

    def __init__(self, port: int, token: str) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self._headers = {"Authorization": f"Bearer {token}"}

    def get(self, path: str, status: int = 200) -> Callable[[], bytes]:
        """A call that GETs ``path`` and reads the whole answer; another status raises."""

        def call() -> bytes:
            self._conn.request("GET", path, headers=self._headers)
            response = self._conn.getresponse()
            body = response.read()
            if response.status != status:
                raise RuntimeError(f"GET {path}: HTTP {response.status} {body[:200]!r}")
            return body

        return call

    def close(self) -> None:
        self._conn.close()


@contextlib.contextmanager
def pigeond_on(db: Path, workdir: Path) -> Iterator[Client]:
    """A real pigeond on ``db`` (delivery off, the default tick) and a client of it."""
    with running(DaemonProcess(workdir, db, opencode_url="", tick_ms=500), START_TIMEOUT_S) as d:
        client = Client(d.port, d.token)
        try:
            yield client
        finally:
            client.close()


@contextlib.contextmanager
def bare_route() -> Iterator[Client]:
    """The bare twisted.web route in a process of its own, and a client of it."""
    proc = subprocess.Popen(
        bench_command("history_http", "--serve-bare"), stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        client = Client(port, "unused")
        try:
            yield client
        finally:
            client.close()
    finally:
        stop_process(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def serve_bare() -> None:
    """Serve the bare route on a free 127.0.0.1 port; print the port, then serve."""
    from twisted.internet import reactor as installed
    from twisted.web import resource, server

    class Bare(resource.Resource):
        isLeaf = True

        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]

        def render_GET(self, request: server.Request) -> bytes:
            request.setHeader(b"content-type", b"application/json")
            return json.dumps({"msg_id": "msg_bare", "state": "handed_off"}).encode()

    class QuietSite(server.Site):
        def log(self, request: Any) -> None:
            """No access log, as pigeond's own site."""

    reactor: Any = installed
    port = reactor.listenTCP(0, QuietSite(Bare()), interface="127.0.0.1")  # type: ignore[no-untyped-call]
    print(port.getHost().port, flush=True)
    reactor.run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--serve-bare", action="store_true", help="serve the bare route")
    if parser.parse_args().serve_bare:
        serve_bare()
