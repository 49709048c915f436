"""Raw bytes on a real daemon's socket (hypothesis): broken request lines and separators,
bad Content-Length and chunked framing, long and many headers, invalid UTF-8, NULs, raw
random bytes, pipelines, and requests sent slowly or stopped short.

Each input goes on a fresh connection.  Whatever the daemon answers must be JSON and no
5xx, with no traceback; a whole request must be answered at once, one stopped short with
408 within ``request_timeout_s``; ``/health`` must answer within a second all along; and
after the run the daemon is alive, its peak resident memory bounded and its log clean.

Runs are derandomized and bounded in count; each test writes its answers' counts by
status to ``fuzz-counts.json`` in its temporary directory, and prints them.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.raw_http import Response, Trickler, health_probe, parse_responses
from tests.fuzz_strategies import HostileBytes, bounded, has_traceback, hostile_bytes

REQUEST_TIMEOUT_S = 1.0
# how late past its deadline a 408 may come (timer and scheduling jitter)
DEADLINE_SLACK_S = 1.0
# how long a whole request may take to be answered over loopback
ANSWER_S = 2.0
# how long to wait for an early answer to bytes that are not a whole request
WAIT_FOR_REST_S = 0.25
HEALTH_S = 1.0
HEALTH_EVERY = 25
MAX_PEAK_RSS_MIB = 200.0
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One daemon for every input (a start per input would be slow), with a short
    request deadline so that inputs stopped short are answered soon."""
    tmp_path: Path = tmp_path_factory.mktemp("fuzz-socket")
    factory = DaemonFactory(tmp_path)
    try:
        yield factory.start(
            tmp_path / "p.db",
            opencode_url="",
            extra_args=["--request-timeout-s", str(REQUEST_TIMEOUT_S)],
        )
    finally:
        factory.close()


@dataclass
class Tally:
    """Answers by status (``none``: the daemon answered nothing), and /health's slowest."""

    counts: Counter[str] = field(default_factory=Counter)
    inputs: int = 0
    slowest_health_s: float = 0.0

    def probe_health(self, daemon: DaemonProcess) -> None:
        response, elapsed = health_probe(daemon.port, HEALTH_S)
        self.slowest_health_s = max(self.slowest_health_s, elapsed)
        assert response is not None and response.status == 200, f"/health: {response}"

    def report(self, tmp_path: Path, name: str, daemon: DaemonProcess) -> None:
        summary = {
            name: {
                "inputs": self.inputs,
                "answers by status": dict(sorted(self.counts.items())),
                "slowest /health s": round(self.slowest_health_s, 3),
                "peak RSS MiB": round(memory_mib(daemon.pid, "VmHWM"), 1),
            }
        }
        (tmp_path / "fuzz-counts.json").write_text(json.dumps(summary, indent=1))
        print(json.dumps(summary))


def memory_mib(pid: int, name: str) -> float:
    """A ``/proc/<pid>/status`` memory field (``VmRSS``, ``VmHWM``) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {name} in /proc/{pid}/status")


def read_answers(sock: socket.socket, until: float, head: bool) -> tuple[bytes, bool]:
    """What the daemon sends until it closes, ``until`` passes, or a whole answer is in and
    nothing more follows at once; and whether it closed."""
    data = b""
    while (left := until - time.monotonic()) > 0:
        if data and _whole(data, head):
            left = min(left, 0.02)  # pipelined answers come together
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return data, False
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def _whole(data: bytes, head: bool) -> bool:
    responses = parse_responses(data)
    if not responses:
        return False
    last = responses[-1]
    return head or len(last.body) >= int(last.headers.get("content-length", "0"))


def exchange(port: int, hostile: HostileBytes) -> tuple[list[Response], bytes, float]:
    """Send the bytes on a fresh connection; the answers, the raw bytes, and how long."""
    started = time.monotonic()
    until = started + (ANSWER_S if hostile.whole else WAIT_FOR_REST_S)
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
            sock.sendall(hostile.data)  # refused while sending: the answer is still read
        raw, _closed = read_answers(sock, until, hostile.head)
    raw = raw.replace(b"HTTP/1.1 100 Continue\r\n\r\n", b"")
    return parse_responses(raw), raw, time.monotonic() - started


def check_answers(hostile: HostileBytes, responses: list[Response], raw: bytes) -> None:
    """No 5xx, JSON errors, no traceback; a whole request answered."""
    assert not has_traceback(raw), raw[:500]
    if hostile.whole:
        assert responses, f"no answer to a whole request: {hostile.data[:300]!r}"
    for response in responses:
        assert response.status < 500, response
        assert response.headers.get("content-type", "").startswith("application/json"), response
        if response.status >= 400 and not hostile.head:
            assert response.is_json_error, response


def assert_survived(daemon: DaemonProcess, tally: Tally) -> None:
    """Alive, /health prompt, peak memory bounded, nothing critical or traced in its log."""
    assert daemon.running, daemon.output()[-3000:]
    tally.probe_health(daemon)
    assert memory_mib(daemon.pid, "VmHWM") < MAX_PEAK_RSS_MIB
    output = daemon.output()
    bad = [line for line in output.splitlines() if line.startswith(("critical", "error"))]
    assert not bad and "Traceback" not in output, output[-3000:]


def test_hostile_bytes_never_get_a_5xx_and_the_daemon_survives(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    """500 inputs of broken HTTP, each on its own connection: JSON answers, no 5xx, no
    traceback, a whole request answered at once; /health prompt all along."""
    tally = Tally()

    @bounded(500)
    @given(hostile=hostile_bytes(daemon.token))
    def run(hostile: HostileBytes) -> None:
        tally.inputs += 1
        if tally.inputs % HEALTH_EVERY == 0:
            tally.probe_health(daemon)
        responses, raw, elapsed = exchange(daemon.port, hostile)
        tally.counts.update(str(r.status) for r in responses)
        if not responses:
            tally.counts["none"] += 1
        check_answers(hostile, responses, raw)
        assert elapsed < ANSWER_S + 0.5

    run()
    assert_survived(daemon, tally)
    tally.report(tmp_path, "socket", daemon)


# -- slow and stopped-short requests -------------------------------------------------------


# a whole head, then a body of which only a part ever comes
SLOW_POST = (
    b"POST /swarm/send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 100000\r\n\r\n"
    b'{"from": "ses_a", "to": "ses_b", "payload": "'
)
SLOW_CHUNKED = (
    b"POST /swarm/send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n1000\r\n{"
)


def slow_requests() -> st.SearchStrategy[tuple[bytes, bytes]]:
    """(first part, trickled byte or nothing): a request cut anywhere, head or body."""
    base = st.sampled_from([SLOW_POST, SLOW_CHUNKED, b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: "])
    first = st.builds(lambda b, n: b[:n], base, st.integers(0, len(SLOW_POST)))
    return st.tuples(first, st.sampled_from([b"", b"a", b" "]))


def test_slow_requests_get_408_by_their_deadline(daemon: DaemonProcess, tmp_path: Path) -> None:
    """Requests stopped short or trickled, many at once: each gets a JSON 408 within
    request_timeout_s of its connection opening (trickling does not extend it)."""
    tally = Tally()
    give_up_s = REQUEST_TIMEOUT_S + DEADLINE_SLACK_S + 1.0

    @bounded(4)
    @given(requests=st.lists(slow_requests(), min_size=10, max_size=30))
    def run(requests: list[tuple[bytes, bytes]]) -> None:
        clients = [Trickler(daemon.port, first, trickle) for first, trickle in requests]
        try:
            started = time.monotonic()
            while time.monotonic() - started < give_up_s:
                for client in clients:
                    client.poll()
                    client.send_more()
                if all(c.closed or c.answered_at is not None for c in clients):
                    break
                if time.monotonic() - started > 0.5:
                    tally.probe_health(daemon)
                time.sleep(0.1)  # the trickle's pace
            for client in clients:
                tally.inputs += 1
                (response,) = parse_responses(client.received)
                tally.counts[str(response.status)] += 1
                assert response.status == 408 and response.is_json_error, response
                assert client.answered_at is not None
                late = client.answered_at - client.opened - REQUEST_TIMEOUT_S
                assert late < DEADLINE_SLACK_S, f"408 came {late:.2f} s after the deadline"
        finally:
            for client in clients:
                client.close()

    run()
    assert_survived(daemon, tally)
    tally.report(tmp_path, "slow", daemon)
