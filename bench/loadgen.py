"""A bounded HTTP/1.1 load generator for the benchmarks, on 127.0.0.1 only.

    .venv/bin/python -m bench.loadgen --port 4097 --connections 64 --duration 10 \\
        [--warmup 1] [--max-requests N] [--token T] [--start-at EPOCH_S] [--unix PATH]

Opens ``--connections`` keep-alive connections (asyncio, raw HTTP/1.1, no
pipelining: each connection sends its next request only after the whole answer
to the previous one came) and posts ``POST /swarm/send`` bodies with a 500-byte
payload, cycling over many distinct senders and targets so that pigeond's flood
guard, at its defaults, refuses none.  Any route that parses a JSON body can
take the same requests.

Bounded in time and in count: requests are sent from ``--start-at`` for
``--warmup`` + ``--duration`` seconds or until ``--max-requests`` were sent,
whichever comes first; answers still in flight then get at most
:data:`DRAIN_S` more.  Only answers that arrive inside the measuring window
(after the warm-up) count toward the rate; every answer counts by status.

Prints one JSON object on stdout (see :class:`Result`): answers by status, the
rate in the window, latency percentiles, and the generator's own CPU seconds
(``resource.getrusage``), so a caller can show the generator was not the
bottleneck.

``--unix PATH`` connects to that Unix socket instead of ``127.0.0.1:PORT`` (pigeond's
own socket, where the peer's credentials stand in for the token).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import resource
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

HOST = "127.0.0.1"
PATH = "/swarm/send"
PAYLOAD_BYTES = 500
SENDERS = 2048
TARGETS = 1024
DRAIN_S = 5.0
CONNECT_TIMEOUT_S = 5.0


def request_bodies(count: int) -> list[bytes]:
    """``count`` JSON bodies, each from a different sender to a different target (cycling
    over :data:`SENDERS` and :data:`TARGETS`), each with a :data:`PAYLOAD_BYTES` payload."""
    bodies = []
    for i in range(count):
        text = f"bench message {i} ".ljust(PAYLOAD_BYTES, "x")
        body = {
            "from": f"bench-sender-{i % SENDERS}",
            "to": f"ses_bench{i % TARGETS}",
            "payload": text,
        }
        bodies.append(json.dumps(body, separators=(",", ":")).encode())
    return bodies


def http_request(port: int | None, body: bytes, token: str | None) -> bytes:
    """One keep-alive ``POST`` of ``body`` as raw bytes (port None: over a Unix socket)."""
    lines = [
        f"POST {PATH} HTTP/1.1",
        f"Host: {HOST}:{port}" if port is not None else "Host: localhost",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body


@dataclass
class Result:
    """What one generator process measured."""

    connections: int
    window_s: float  # the measuring window's length
    in_window: int  # answers (any status) that arrived inside the window
    ok_in_window: int  # 2xx answers inside the window
    statuses: dict[str, int]  # every answer by status, warm-up and drain included
    sent: int
    connection_errors: int  # connections that could not be made
    lost: int  # requests sent whose connection closed before their answer
    unanswered: int  # requests still without an answer when the drain time ran out
    cpu_window_s: float  # this process's user + system CPU seconds inside the window
    cpu_s: float  # ... over its whole run (start-up and warm-up included)
    wall_s: float  # from --start-at to the last answer
    latency_ms: dict[str, float] = field(default_factory=dict)  # in the window: p50, p99, max


class _Answers:
    """Splits a byte stream into HTTP/1.1 answers (Content-Length or chunked bodies)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[int]:
        """Add received bytes; the status of each answer now complete, in order."""
        self._buffer += data
        statuses: list[int] = []
        while True:
            status = self._one()
            if status is None:
                return statuses
            statuses.append(status)

    def _one(self) -> int | None:
        buffer = self._buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = bytes(buffer[:end]).lower()
        start = end + 4
        length = _content_length(head)
        if length is not None:
            if len(buffer) < start + length:
                return None
            del buffer[: start + length]
        else:
            body_end = _chunked_end(buffer, start) if b"chunked" in head else start
            if body_end is None:
                return None
            del buffer[:body_end]
        return int(head[9:12])


def _content_length(head: bytes) -> int | None:
    at = head.find(b"\r\ncontent-length:")
    if at < 0:
        return None
    value_end = head.find(b"\r\n", at + 2)
    return int(head[at + 17 : value_end if value_end >= 0 else len(head)])


def _chunked_end(buffer: bytearray, at: int) -> int | None:
    """Where a chunked body starting at ``at`` ends (after its last CRLF), if it is whole."""
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        size = int(bytes(buffer[at:line_end]).split(b";")[0], 16)
        if size == 0:
            trailer_end = buffer.find(b"\r\n", line_end + 2)
            return None if trailer_end < 0 else trailer_end + 2
        at = line_end + 2 + size + 2
        if len(buffer) < at:
            return None


class _Shared:
    """State all connections of one generator share: the bounds and the counts."""

    def __init__(self, args: argparse.Namespace, requests: list[bytes]) -> None:
        self.requests = requests
        self.start_at = float(args.start_at)
        self.window_start = self.start_at + float(args.warmup)
        self.window_end = self.window_start + float(args.duration)
        self.max_requests = int(args.max_requests)
        self.sent = 0
        self.statuses: Counter[int] = Counter()
        self.in_window = 0
        self.ok_in_window = 0
        self.latencies: list[float] = []
        self.connection_errors = 0
        self.lost = 0
        self.last_answer = 0.0

    def more_allowed(self) -> bool:
        """Whether a bound (count or time) still lets one more request go."""
        return self.sent < self.max_requests and time.time() < self.window_end

    def next_request(self) -> bytes | None:
        """The next request to send, or None once a bound is reached."""
        if not self.more_allowed():
            return None
        request = self.requests[self.sent % len(self.requests)]
        self.sent += 1
        return request

    def answered(self, status: int, sent_at: float) -> None:
        now = time.time()
        self.last_answer = now
        self.statuses[status] += 1
        if self.window_start <= now < self.window_end:
            self.in_window += 1
            if 200 <= status < 300:
                self.ok_in_window += 1
            self.latencies.append(now - sent_at)


class _Client(asyncio.Protocol):
    """One keep-alive connection: a request, its whole answer, the next request."""

    def __init__(self, shared: _Shared, done: asyncio.Future[None]) -> None:
        self._shared = shared
        self._done = done
        self._answers = _Answers()
        self._transport: asyncio.Transport | None = None
        self._sent_at = 0.0
        self._waiting = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def start(self) -> None:
        self._send_next()

    def _send_next(self) -> None:
        assert self._transport is not None
        request = self._shared.next_request()
        if request is None:
            self._transport.close()
            return
        self._sent_at = time.time()
        self._waiting = True
        self._transport.write(request)

    def data_received(self, data: bytes) -> None:
        for status in self._answers.feed(data):
            self._waiting = False
            self._shared.answered(status, self._sent_at)
            self._send_next()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._waiting:
            self._shared.lost += 1
            self._waiting = False
        if not self._done.done():
            self._done.set_result(None)


async def _connection(shared: _Shared, port: int | None, unix: str | None) -> None:
    """Run one connection until its bounds; reconnect when the server closes it early."""
    loop = asyncio.get_running_loop()
    while shared.more_allowed():
        done: asyncio.Future[None] = loop.create_future()
        factory = functools.partial(_Client, shared, done)
        if unix is not None:
            connecting = loop.create_unix_connection(factory, unix)
        else:
            assert port is not None  # one of --port and --unix is required
            connecting = loop.create_connection(factory, HOST, port)
        try:
            _transport, client = await asyncio.wait_for(connecting, CONNECT_TIMEOUT_S)
        except (TimeoutError, OSError):
            shared.connection_errors += 1
            await asyncio.sleep(0.01)
            continue
        await asyncio.sleep(max(shared.start_at - time.time(), 0))
        client.start()
        await done


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _cpu_in_window(shared: _Shared) -> float:
    """This process's CPU seconds between the window's start and its end."""
    await asyncio.sleep(max(shared.window_start - time.time(), 0))
    before = _cpu_s()
    await asyncio.sleep(max(shared.window_end - time.time(), 0))
    return _cpu_s() - before


async def _generate(args: argparse.Namespace) -> Result:
    port = None if args.unix else args.port
    requests = [http_request(port, b, args.token) for b in request_bodies(args.bodies)]
    shared = _Shared(args, requests)
    connections = [_connection(shared, port, args.unix) for _ in range(args.connections)]
    cpu_window = asyncio.ensure_future(_cpu_in_window(shared))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(
            asyncio.gather(*connections),
            timeout=max(shared.window_end - time.time(), 0) + DRAIN_S,
        )
    cpu_window_s = await cpu_window
    return Result(
        connections=args.connections,
        window_s=args.duration,
        in_window=shared.in_window,
        ok_in_window=shared.ok_in_window,
        statuses={str(k): v for k, v in sorted(shared.statuses.items())},
        sent=shared.sent,
        connection_errors=shared.connection_errors,
        lost=shared.lost,
        unanswered=shared.sent - sum(shared.statuses.values()) - shared.lost,
        cpu_window_s=cpu_window_s,
        cpu_s=_cpu_s(),
        wall_s=max(shared.last_answer - shared.start_at, 0.0),
        latency_ms=_percentiles(shared.latencies),
    )


def _percentiles(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {}
    ordered = sorted(latencies)

    def pick(q: float) -> float:
        return 1000 * ordered[min(int(q * len(ordered)), len(ordered) - 1)]

    return {"p50": pick(0.50), "p99": pick(0.99), "max": 1000 * ordered[-1]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int, help="the server's TCP port on 127.0.0.1")
    where.add_argument("--unix", help="the server's Unix socket, instead of a port")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--duration", type=float, default=10.0, help="measuring window, s")
    parser.add_argument("--warmup", type=float, default=1.0, help="s before the window")
    parser.add_argument("--max-requests", type=int, default=1_000_000)
    parser.add_argument("--bodies", type=int, default=SENDERS * 2, help="distinct bodies")
    parser.add_argument("--token", default=None, help="bearer token to send, if any")
    parser.add_argument("--start-at", type=float, default=0.0, help="epoch s; 0: now")
    args = parser.parse_args(argv)
    if args.start_at <= 0:
        args.start_at = time.time()
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = asyncio.run(_generate(args))
    print(json.dumps(asdict(result)))


if __name__ == "__main__":
    main()
