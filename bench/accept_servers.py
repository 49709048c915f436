"""The servers bench/accept_table.py loads: its baselines and pigeond, each started pinned.

The baselines are the yardsticks pigeond's accepts are measured against: a bare twisted.web
JSON route that stores nothing, the same route with one commit per request (naive), and
the cheapest group commit (grouped).  Each runs in a child process of its own,
``python -m bench.accept_table --serve bare|naive|grouped``, so that it has a reactor and
a CPU to itself as pigeond does; a real pigeond comes from testkit/daemon_process.py.
What is started lives here; how it is loaded and measured is bench/accept_load.py's job.
"""

from __future__ import annotations

import contextlib
import json
import select
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from twisted.web import resource, server

from bench.harness import GUARD_OFF, ROOT, Cpus, bench_command, pin_tasks, pinning, running
from testkit.daemon_process import DaemonProcess, stop_process

SERVER_START_TIMEOUT_S = 15.0
# The guard at its defaults but the caller's bucket: the load comes over TCP, where every
# client is one caller, so its defaults (40 a second) would refuse it; raised out of reach,
# the bucket is still charged for every send, which is what the figure is for.
CALLER_OUT_OF_REACH = ("--caller-rate-per-s", "1000000", "--caller-burst", "10000000")

NAIVE_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY,
    msg_id TEXT NOT NULL UNIQUE,
    from_session TEXT NOT NULL,
    to_session TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at INTEGER NOT NULL
)"""
NAIVE_INSERT = (
    "INSERT INTO messages (msg_id, from_session, to_session, payload, created_at)"
    " VALUES (?, ?, ?, ?, ?)"
)


# -- the bare and naive servers (run as ``--serve bare|naive``) -----------------------


class JsonRoute(resource.Resource):
    """Parses the JSON body and answers 202 ``{"accepted": true}``; with a connection, also
    inserts a row and commits it (autocommit) before answering, on the reactor thread."""

    isLeaf = True

    def __init__(self, conn: sqlite3.Connection | None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.conn = conn
        self.count = 0

    def render_POST(self, request: server.Request) -> bytes:
        assert request.content is not None
        body = json.loads(request.content.read())
        if not isinstance(body, dict):
            request.setResponseCode(400)
            return b'{"error": "body must be a JSON object"}'
        if self.conn is not None:
            self.count += 1
            row = (f"msg_naive_{self.count}", body["from"], body["to"], body["payload"])
            self.conn.execute(NAIVE_INSERT, (*row, int(time.time() * 1000)))
        request.setResponseCode(202)
        request.setHeader(b"content-type", b"application/json")
        return b'{"accepted": true}'


class GroupedRoute(resource.Resource):
    """The bare route plus group commit in its cheapest form: the requests parsed in one
    reactor turn are inserted in one transaction, committed (FULL) on the reactor thread at
    the end of the turn, then answered.  Nothing else: no validation, auth, log or thread.
    What any design that stores each send before its 202 can at best reach here."""

    isLeaf = True

    def __init__(self, conn: sqlite3.Connection, reactor: Any) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.conn = conn
        self.reactor = reactor
        self.count = 0
        self.waiting: list[tuple[server.Request, tuple[str, str, str, str, int]]] = []

    def render_POST(self, request: server.Request) -> int | bytes:
        assert request.content is not None
        body = json.loads(request.content.read())
        if not isinstance(body, dict):
            request.setResponseCode(400)
            return b'{"error": "body must be a JSON object"}'
        self.count += 1
        row = (f"msg_grouped_{self.count}", body["from"], body["to"], body["payload"])
        if not self.waiting:
            self.reactor.callLater(0, self.commit)
        self.waiting.append((request, (*row, int(time.time() * 1000))))
        return server.NOT_DONE_YET

    def commit(self) -> None:
        group, self.waiting = self.waiting, []
        with self.conn:  # one transaction, one fsync
            self.conn.executemany(NAIVE_INSERT, [row for _, row in group])
        for request, _ in group:
            request.setResponseCode(202)
            request.setHeader(b"content-type", b"application/json")
            request.setHeader(b"content-length", b"18")
            request.write(b'{"accepted": true}')
            request.finish()


class QuietSite(server.Site):
    def log(self, request: Any) -> None:
        """No access log, as pigeond's own site."""


def serve(kind: str, db: str) -> None:
    """The bare (or naive) route on 127.0.0.1, an ephemeral port, until SIGTERM."""
    from twisted.internet import reactor as installed

    reactor: Any = installed
    route: resource.Resource
    if kind == "grouped":
        conn = open_naive_db(db)
        conn.isolation_level = "IMMEDIATE"  # transactions, not autocommit
        route = GroupedRoute(conn, reactor)
    else:
        route = JsonRoute(open_naive_db(db) if kind == "naive" else None)
    site = QuietSite(route)  # type: ignore[no-untyped-call]
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    print(f"listening on {port.getHost().port}", flush=True)
    reactor.run()


def open_naive_db(path: str) -> sqlite3.Connection:
    """A connection in autocommit mode: each INSERT is its own transaction and commit."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(NAIVE_SCHEMA)
    return conn


# -- processes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    port: int
    pid: int
    token: str | None = None
    unix: str | None = None  # load it over this Unix socket instead of the port


def read_port(stdout: IO[str], timeout_s: float) -> int:
    ready, _, _ = select.select([stdout], [], [], timeout_s)
    line = stdout.readline() if ready else ""
    if not line.startswith("listening on "):
        raise RuntimeError(f"the server did not start: {line!r}")
    return int(line.split()[-1])


@contextlib.contextmanager
def tiny_server(kind: str, workdir: Path, cpus: Cpus) -> Iterator[Server]:
    """The bare or naive route in a subprocess pinned to the server's CPU."""
    args = bench_command("accept_table", "--serve", kind, "--db", str(workdir / "naive.db"))
    with (workdir / "server.log").open("w") as log:
        proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=ROOT,
            preexec_fn=pinning(cpus.daemon),
        )
        try:
            assert proc.stdout is not None
            yield Server(read_port(proc.stdout, SERVER_START_TIMEOUT_S), proc.pid)
        finally:
            stop_process(proc)
            if proc.stdout is not None:
                proc.stdout.close()


def source_env(src: Path | None) -> dict[str, str]:
    """The environment that makes ``python -m pigeond`` import pigeond from ``src``."""
    return {} if src is None else {"PYTHONPATH": str(src)}


def pigeond_daemon(
    workdir: Path,
    *,
    guard: bool,
    env: dict[str, str] | None = None,
    auth: str = "token",
    unix: Path | None = None,
) -> DaemonProcess:
    """A pigeond for one run: flood guard on or off, ``auth`` as given, listening on
    127.0.0.1 or, with ``unix``, on that Unix socket only (peer credentials checked)."""
    extra = [*(CALLER_OUT_OF_REACH if guard else GUARD_OFF), "--auth", auth]
    listen = "tcp:0:interface=127.0.0.1" if unix is None else f"unix:{unix}"
    return DaemonProcess(
        workdir, workdir / "pigeond.db", opencode_url="", tick_ms=500, extra_args=extra,
        env=env, listen=listen,
    )  # fmt: skip


@contextlib.contextmanager
def pigeond_server(
    daemon: DaemonProcess, cpus: Cpus, unix: Path | None = None, *, token: bool = True
) -> Iterator[Server]:
    """``daemon`` started and pinned; loaded over ``unix`` if given (the socket stands in
    for the token), else over TCP with its token (none with ``auth = none``)."""
    with running(daemon, SERVER_START_TIMEOUT_S):
        pin_tasks(daemon.pid, cpus.daemon)
        if unix is not None:
            yield Server(0, daemon.pid, None, str(unix))
        else:
            yield Server(daemon.port, daemon.pid, daemon.token if token else None)
