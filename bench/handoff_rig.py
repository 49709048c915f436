"""What bench/handoff_table.py and bench/memory_table.py share: the processes and the sender.

Not run by itself.  It starts a stand-in opencode (bench/standin_opencode.py) and a
real pigeond (testkit/daemon_process.py), pins them, sends ``POST /swarm/send`` from
this process (asyncio, raw HTTP/1.1 keep-alive connections, 127.0.0.1 only, every
loop bounded), and reads the delivery timestamps back from the daemon's database.

CPU placement, with 2 CPUs or more: pigeond (all its threads) on the first CPU; the
stand-in, the sender and this script on the others.  The daemon gets a core of its
own, as in bench/accept_table.py, so what limits a figure is pigeond.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import time
import urllib.request
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import (
    BRAKES_OFF,
    GUARD_OFF,
    ROOT,
    Cpus,
    bench_command,
    pin_tasks,
    pinning,
    running,
)
from testkit.daemon_process import DaemonProcess, stop_process

HOST = "127.0.0.1"
TARGETS = 100
SENDERS = 10
PAYLOAD_BYTES = 500
START_TIMEOUT_S = 15.0
# pigeond's defaults for delivery (testkit/daemon_process.py passes call/1 for its tests)
DELIVERY = ("--delivery", "turn", "--batch-max", "10")
TICK_MS = 500  # the default: new messages go out at once (kick); the tick is a safety net


# -- processes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Standin:
    port: int
    pid: int

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.loads(response.read())

    def stats(self) -> dict[str, Any]:
        found: dict[str, Any] = self.get("/_standin/stats")
        return found

    def phase(self, hold_ms: float = 0, turn_ms: float = 0) -> None:
        """New hold and turn times; the overlap counts and arrivals start again."""
        body = json.dumps({"hold_ms": hold_ms, "turn_ms": turn_ms}).encode()
        request = urllib.request.Request(self.url + "/_standin/phase", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def received(self) -> dict[str, float]:
        """msg_id -> ``time.monotonic()`` when its prompt arrived."""
        return dict(self.get("/_standin/received"))


@contextlib.contextmanager
def standin(
    workdir: Path, cpus: Cpus, *, hold_ms: float = 0, turn_ms: float = 0, record: int = 0
) -> Iterator[Standin]:
    """The stand-in opencode in a subprocess on the non-daemon CPUs; stopped on exit."""
    args = bench_command("standin_opencode", "--root", str(workdir / "opencode"),
                         "--hold-ms", str(hold_ms), "--turn-ms", str(turn_ms),
                         "--record", str(record))  # fmt: skip
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        preexec_fn=pinning(cpus.others),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the stand-in prints it first, or dies
        if not line.startswith("listening on "):
            raise RuntimeError(f"the stand-in opencode did not start: {line!r}")
        yield Standin(int(line.split()[-1]), proc.pid)
    finally:
        stop_process(proc, 5)
        if proc.stdout is not None:
            proc.stdout.close()


class BenchDaemon(DaemonProcess):
    """A DaemonProcess that keeps only the tail of the daemon's output: it logs a few lines
    per message, and a million messages must not fill this process's memory."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lines = deque(maxlen=2000)  # type: ignore[assignment]


@contextlib.contextmanager
def daemon(
    workdir: Path,
    opencode_url: str,
    cpus: Cpus,
    extra: Sequence[str] = (),
    *,
    launcher: str | None = None,
    env: dict[str, str] | None = None,
    db: Path | str | None = None,
) -> Iterator[BenchDaemon]:
    """A fresh pigeond (turn delivery, batches of 10, flood guard and brakes off), pinned;
    ``launcher``: Python code run with ``-c`` instead of ``-m pigeond``, that runs it;
    ``db``: its ``--db`` (a ``postgresql://`` URL, say), else ``workdir/pigeond.db``."""
    args = [*DELIVERY, *GUARD_OFF, *BRAKES_OFF, *extra]
    proc = BenchDaemon(
        workdir, db or workdir / "pigeond.db", opencode_url=opencode_url, tick_ms=TICK_MS,
        extra_args=args, env=env,
    )  # fmt: skip
    if launcher is not None:
        proc.args[1:3] = ["-c", launcher]
    with running(proc, START_TIMEOUT_S):
        pin_tasks(proc.pid, cpus.daemon)
        yield proc


# -- sending -----------------------------------------------------------------------------------


def target_name(k: int) -> str:
    return f"ses_bench{k:03d}"


def request_bytes(port: int, token: str, index: int, target: str) -> bytes:
    """One ``POST /swarm/send`` with a PAYLOAD_BYTES payload, from one of SENDERS."""
    text = f"bench message {index} ".ljust(PAYLOAD_BYTES, "x")
    body = json.dumps(
        {"from": f"ses_sender{index % SENDERS}", "to": target, "payload": text},
        separators=(",", ":"),
    ).encode()
    head = (
        f"POST /swarm/send HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


@dataclass(frozen=True, slots=True)
class Sent:
    """One send: its target, the msg_id of its 202 (None otherwise), and when (monotonic)."""

    target: str
    msg_id: str | None
    status: int
    due: float  # when the plan wanted it sent
    sent: float  # when its request was written
    answered: float  # when its whole answer had been read


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bytes]:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    at = head.lower().find(b"content-length:")
    length = int(head[at + 15 : head.index(b"\r\n", at)]) if at >= 0 else 0
    return status, await reader.readexactly(length)


Plan = Callable[[int], tuple[float, str] | None]  # index -> (due, target), None when done


@dataclass
class Sending:
    """What a :func:`send_plan` did: every send (when asked to keep them) and the counts."""

    sent: list[Sent]
    statuses: Counter[int]

    @property
    def accepted(self) -> int:
        return self.statuses[202]


async def _worker(
    port: int,
    token: str,
    queue: asyncio.Queue[tuple[int, float, str] | None],
    out: Sending,
    keep: bool,
) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        while (item := await queue.get()) is not None:
            index, due, target = item
            sent = time.monotonic()
            status, body = await _exchange(
                reader, writer, request_bytes(port, token, index, target)
            )
            out.statuses[status] += 1
            if keep:
                msg_id = json.loads(body).get("msg_id") if status == 202 else None
                out.sent.append(Sent(target, msg_id, status, due, sent, time.monotonic()))
    finally:
        writer.close()


async def send_plan(
    port: int, token: str, plan: Plan, *, connections: int, limit_s: float, keep: bool = True
) -> Sending:
    """Send what ``plan`` says when it says it (open loop: a slow answer does not delay the
    next send, as long as a connection is free), over ``connections`` keep-alive
    connections; all within ``limit_s`` seconds, else TimeoutError.  ``keep``: keep every
    :class:`Sent` (else only the counts, for runs of a million)."""
    queue: asyncio.Queue[tuple[int, float, str] | None] = asyncio.Queue(4 * connections)
    out = Sending([], Counter())
    workers = [
        asyncio.ensure_future(_worker(port, token, queue, out, keep)) for _ in range(connections)
    ]

    async def dispatch() -> None:
        index = 0
        while (step := plan(index)) is not None:
            due, target = step
            delay = due - time.monotonic()
            if delay > 0.0005:
                await asyncio.sleep(delay)
            await queue.put((index, due, target))
            index += 1
        for _ in workers:
            await queue.put(None)

    try:
        await asyncio.wait_for(asyncio.gather(dispatch(), *workers), limit_s)
    finally:
        for worker in workers:
            worker.cancel()
    return out


def paced(start: float, rate: float, targets: Sequence[str]) -> Plan:
    """Message ``i`` to ``targets[i]``, due at ``start + i / rate``."""

    def step(index: int) -> tuple[float, str] | None:
        return None if index >= len(targets) else (start + index / rate, targets[index])

    return step


# -- reading back ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    msg_id: str
    target: str
    state: str
    created_at: int  # ms: when the send was parsed, before its commit
    handed_off_at: int | None  # ms: when opencode's 204 came back


def read_rows(db: Path, msg_ids: Sequence[str]) -> dict[str, Row]:
    """The delivery rows of ``msg_ids``, read-only (the daemon may still run)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        conn.execute("CREATE TEMP TABLE wanted (msg_id TEXT PRIMARY KEY)")
        conn.executemany("INSERT OR IGNORE INTO wanted VALUES (?)", ((m,) for m in msg_ids))
        rows = conn.execute(
            "SELECT m.msg_id, m.to_session, m.state, m.created_at, m.handed_off_at"
            " FROM swarm_messages m JOIN wanted USING (msg_id)"
        ).fetchall()
    finally:
        conn.close()
    return {r[0]: Row(*r) for r in rows}


def wait_for_messages(standin: Standin, count: int, limit_s: float) -> dict[str, Any]:
    """Until the stand-in has been handed ``count`` messages; RuntimeError after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while True:
        stats = standin.stats()
        if stats["messages"] >= count:
            return stats
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"only {stats['messages']:,} of {count:,} messages handed off within {limit_s} s"
            )
        time.sleep(0.05)


def prime(port: int, token: str, standin: Standin, targets: Sequence[str]) -> None:
    """One message to each target, all handed off: the registry, the turn tracker, the
    modes and the connection pool are warm before anything is measured."""
    before = standin.stats()["messages"]
    plan = paced(time.monotonic(), 200.0, list(targets))
    sending = asyncio.run(send_plan(port, token, plan, connections=8, limit_s=30))
    if sending.accepted != len(targets):
        raise RuntimeError(f"priming failed: {dict(sending.statuses)}")
    wait_for_messages(standin, before + len(targets), 30)
