"""The adversarial review's table, re-run at full size against the current pigeond.

    .venv/bin/python -m bench.abuse_table [--quick]

Each row starts its own pigeond subprocess (testkit/daemon_process.py) in a fresh temporary
directory, on 127.0.0.1, with the defaults unless the row says otherwise, and measures
from the outside what issue 11 says must be true:

1. slowloris: 1,100 connections trickling a byte every 5 s for ~30 s into a daemon
   started with a soft open-files limit of 1024, /health probed once a second;
2. 2,000 idle connections (at a soft limit of 1024 the daemon may raise, and at a fixed
   1024), /health probed 150 times;
3. inbox memory: 1,000 handed-off messages of 256 KiB for one session, 16 clients that
   ask for all of them and never read, one reader paging through: peak RSS and /health;
4. another process holding SQLite's write lock for 20 s: /health latency and sends;
5. the database file deleted under the daemon: 503s, a critical line, a second daemon;
6. 10 messages of 262 KB queued for one target: the largest prompt handed to opencode;
7. the disk filling up while delivering (a tmpfs; needs root): prompts per message;
8. SIGTERM while a hand-off outlasts stop_timeout_s: exit code, log, message state.

A stand-in opencode (testkit/fake_opencode.py) takes the prompts where a row needs one.
``--quick`` runs every row at a smaller size, as a smoke check.  Prints one markdown
table (row, what was measured, the figure, the target, met) and the machine it ran on.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import testkit.fake_opencode as fake_opencode
from bench.harness import (
    arguments,
    machine_line,
    markdown_table,
    parse,
    percentile,
    running,
    scratch_dir,
)
from pigeond.storage.schema import DEFAULT_BUSY_TIMEOUT_MS
from testkit.daemon_process import DaemonProcess, DaemonStartError
from testkit.fake_opencode import FakeOpencode
from testkit.fault_helpers import TARGET, fill, prompts_per_message, send, states
from testkit.inbox_load import READER, handed_off, inbox_request, stalled_reader, status_line
from testkit.polling import wait_until
from testkit.process_stats import hard_nofile, memory_mib, open_files_limit
from testkit.raw_http import Response, Trickler, health_probe, parse_responses

T = TypeVar("T")

DEFAULT_TICK_MS = 500
BATCH_MAX_BYTES = 1024 * 1024  # pigeond's default batch_max_bytes
BIG_PAYLOAD_CHARS = 262_000  # "262 KB": as large as one send's 256 KiB body allows
INBOX_PAYLOAD_BYTES = 256 * 1024
RSS_LIMIT_MIB = 300
BUSY_TIMEOUT_S = DEFAULT_BUSY_TIMEOUT_MS / 1000


@dataclass(frozen=True)
class Size:
    """How big each row is: the review's figures, or smaller for ``--quick``."""

    tricklers: int = 1100
    trickle_s: int = 30
    idle: int = 2000
    idle_probes: int = 150
    inbox_messages: int = 1000
    stalled: int = 16
    lock_s: float = 20.0
    batch: int = 10
    disk_messages: int = 10
    full_s: float = 5.0


FULL = Size()
QUICK = Size(
    tricklers=150, trickle_s=6, idle=300, idle_probes=20, inbox_messages=60, stalled=4,
    lock_s=8.0, batch=4, disk_messages=3, full_s=3.0,
)  # fmt: skip


@dataclass(frozen=True)
class Row:
    number: str
    measured: str
    figure: str
    target: str
    met: str  # "yes", "NO", "skipped", or "answered, but N/M not 200"


# -- shared helpers -------------------------------------------------------------------------


def workdir() -> contextlib.AbstractContextManager[Path]:
    return scratch_dir("abuse")


class Sampler(Generic[T]):
    """Calls ``sample`` every ``every_s`` seconds on a thread while in its ``with``."""

    def __init__(self, sample: Callable[[], T | None], every_s: float) -> None:
        self.sample = sample
        self.every_s = every_s
        self.values: list[T] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                value = self.sample()
                if value is not None:
                    self.values.append(value)
            self._stop.wait(self.every_s)

    def __enter__(self) -> Sampler[T]:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@dataclass(frozen=True)
class Probe:
    latency_s: float
    response: Response | None

    @property
    def status(self) -> int | None:
        return None if self.response is None else self.response.status


def probe(port: int, timeout_s: float = 1.0) -> Probe:
    response, latency = health_probe(port, timeout_s)
    return Probe(latency, response)


def tally(items: list[Any]) -> str:
    """``200x28, 503x2``: how often each value came, most common first."""
    return ", ".join(f"{value}x{n}" for value, n in Counter(items).most_common()) or "none"


def summary(probes: list[Probe], within_s: float) -> str:
    """Answered within the time / total, the statuses, and the worst latency."""
    in_time = sum(p.response is not None and p.latency_s < within_s for p in probes)
    worst = max((p.latency_s for p in probes), default=0.0)
    return (
        f"{in_time}/{len(probes)} answered within {within_s:g} s"
        f" (status {tally([p.status for p in probes])}), max {worst:.3f} s"
    )


def refusals(probes: list[Probe]) -> str:
    """The error texts of the answers that were not 200."""
    texts = []
    for p in probes:
        if p.response is not None and p.status != 200:
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                texts.append(str(p.response.json().get("error")))
    return tally(texts) if texts else "-"


def recovery(port: int, probes: list[Probe], since: float, limit_s: float = 45) -> str:
    """When the last probe was not a 200: probe every 0.25 s until one is, and say how long
    after ``since`` it came."""
    if probes and probes[-1].status == 200:
        return "/health 200 again by the last probe"
    while time.monotonic() - since < limit_s:
        if probe(port).status == 200:
            return f"/health 200 again {time.monotonic() - since:.1f} s after the attack began"
        time.sleep(0.25)
    return f"/health not 200 again within {limit_s:g} s"


def answered(probes: list[Probe], within_s: float) -> str:
    """Met: every probe answered in time; said apart: answered, but not all with 200."""
    if not all(p.response is not None and p.latency_s < within_s for p in probes):
        return "NO"
    busy = sum(p.status != 200 for p in probes)
    return "yes" if busy == 0 else f"answered, but {busy}/{len(probes)} not 200"


def limit_problems(daemon: DaemonProcess) -> str:
    out = daemon.output()
    found = [w for w in ("EMFILE", "Too many open files", "Could not accept") if w in out]
    return "log: " + (", ".join(found) if found else "no EMFILE / accept errors")


def yes(ok: bool) -> str:
    return "yes" if ok else "NO"


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


# -- 3. inbox memory ------------------------------------------------------------------------


def read_whole_inbox(daemon: DaemonProcess, deadline: float) -> tuple[int, int]:
    """Page through READER's inbox as a normal client; (messages, pages) read."""
    messages = pages = 0
    cursor: str | None = None
    while time.monotonic() < deadline and pages < 5000:
        since = "" if cursor is None else f"&since={cursor}"
        request = urllib.request.Request(
            f"{daemon.base_url}/swarm/inbox?session={READER}&limit=1000{since}",
            headers=daemon.auth_headers,
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            page = json.loads(answer.read())
        messages, pages, cursor = messages + len(page["messages"]), pages + 1, page["next_cursor"]
        if not page["has_more"]:
            break
    return messages, pages


def stall_and_read(daemon: DaemonProcess, size: Size) -> tuple[list[bytes], tuple[int, int]]:
    """Open the stalled readers, then page through the inbox; their status lines, and what
    the normal reader read."""
    with contextlib.ExitStack() as sockets:
        request = inbox_request(daemon)
        clients = [
            sockets.enter_context(stalled_reader(daemon, request)) for _ in range(size.stalled)
        ]
        statuses = [status_line(c) for c in clients]
        read = read_whole_inbox(daemon, time.monotonic() + 180)
        time.sleep(1.0)  # a last look at memory and /health with the stalled clients held
    return statuses, read


def row_inbox_memory(size: Size) -> Row:
    with workdir() as work:
        db = work / "state" / "pigeond.db"
        started = time.monotonic()
        handed_off(db, ["x" * INBOX_PAYLOAD_BYTES] * size.inbox_messages)
        filled_s = time.monotonic() - started
        with running(DaemonProcess(work, db, opencode_url="")) as daemon:
            pid = daemon.pid
            rss: Sampler[float] = Sampler(lambda: memory_mib(pid, "VmRSS"), 0.02)
            health: Sampler[Probe] = Sampler(lambda: probe(daemon.port, 5.0), 0.25)
            with rss, health:
                statuses, (messages, pages) = stall_and_read(daemon, size)
            peak = memory_mib(pid, "VmHWM")
    p99 = percentile([p.latency_s for p in health.values], 0.99)
    ok = peak < RSS_LIMIT_MIB and all(p.status == 200 and p.latency_s < 1 for p in health.values)
    return Row(
        "3",
        f"inbox memory: {size.inbox_messages} handed-off messages of 256 KiB for one session"
        f" (stored in {filled_s:.0f} s); {size.stalled} clients GET /swarm/inbox?limit=1000"
        " and never read (4 KiB receive buffer), one reader pages through it all",
        f"RSS max sampled {max(rss.values, default=0.0):.0f} MiB, VmHWM {peak:.0f} MiB;"
        f" /health: {summary(health.values, 1.0)}, p99 {p99:.3f} s;"
        f" stalled clients' status lines: {tally([s.decode() for s in statuses])};"
        f" reader: {messages} messages in {pages} pages",
        f"RSS < {RSS_LIMIT_MIB} MiB, /health within 1 s",
        yes(ok),
    )


# -- 4. the write lock held by another process -------------------------------------------


def timed_send(daemon: DaemonProcess, msg_id: str) -> tuple[str, float]:
    body = {"from": "ses_sender", "to": "ses_target", "payload": "lock", "msg_id": msg_id}
    started = time.monotonic()
    try:
        status, _ = daemon.request_json("POST", "/swarm/send", body, timeout_s=30)
        outcome = str(status)
    except Exception as e:  # a hang or a reset is the figure, not a crash of the bench
        outcome = type(e).__name__
    return outcome, time.monotonic() - started


def sends_until(daemon: DaemonProcess, until: float, into: list[tuple[str, float]]) -> None:
    """Send one after another while a send can still end before ``until``."""
    while time.monotonic() < until and len(into) < 10:
        into.append(timed_send(daemon, f"msg_lock{len(into)}"))


def held_lock(daemon: DaemonProcess, lock_s: float) -> tuple[list[Probe], list[tuple[str, float]]]:
    """Hold BEGIN IMMEDIATE on the daemon's file for ``lock_s``: /health every 100 ms, and
    sends on a thread meanwhile."""
    conn = sqlite3.connect(daemon.db, isolation_level=None, timeout=0)
    sends: list[tuple[str, float]] = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        release = time.monotonic() + lock_s
        sender = threading.Thread(
            target=sends_until, args=(daemon, release - BUSY_TIMEOUT_S - 1, sends), daemon=True
        )
        sender.start()
        probes = []
        while time.monotonic() < release:
            started = time.monotonic()
            probes.append(probe(daemon.port, 2.0))
            time.sleep(max(0.0, 0.1 - (time.monotonic() - started)))
        conn.execute("COMMIT")
        sender.join(timeout=40)
    finally:
        conn.close()
    return probes, sends


def row_write_lock(size: Size) -> Row:
    with workdir() as work:
        db = work / "state" / "pigeond.db"
        with running(DaemonProcess(work, db, opencode_url="")) as daemon:
            probes, sends = held_lock(daemon, size.lock_s)
            after, after_s = timed_send(daemon, "msg_after")
    latencies = [p.latency_s for p in probes]
    sends_ok = bool(sends) and all(
        s == "503" and BUSY_TIMEOUT_S - 0.5 <= t <= BUSY_TIMEOUT_S + 2 for s, t in sends
    )
    fast = all(p.status == 200 and p.latency_s < 0.1 for p in probes)
    return Row(
        "4",
        f"another process's sqlite3 connection holds BEGIN IMMEDIATE for {size.lock_s:g} s:"
        " GET /health every 100 ms, POST /swarm/send one after another; then a send",
        f"/health: {len(probes)} probes, status {tally([p.status for p in probes])},"
        f" max {max(latencies) * 1000:.1f} ms, p99 {percentile(latencies, 0.99) * 1000:.1f} ms;"
        f" sends during the lock: {', '.join(f'{s} in {t:.2f} s' for s, t in sends)};"
        f" after release: {after} in {after_s:.3f} s",
        f"/health within 100 ms; each send 503 after ~{BUSY_TIMEOUT_S:g} s (busy timeout),"
        " never a hang; 202 after release",
        yes(fast and sends_ok and after == "202"),
    )


# -- 5. the database file deleted ------------------------------------------------------------


def second_daemon(work: Path, db: Path, url: str) -> str:
    """Start another pigeond on ``db`` with ``<db>.lock`` deleted: how it went."""
    Path(f"{db}.lock").unlink(missing_ok=True)
    other = DaemonProcess(work, db, opencode_url=url)
    try:
        other.start(timeout_s=20)
    except DaemonStartError as e:
        code = re.search(r"exited with code (-?\d+)", str(e))
        lines = [line for line in other.output().splitlines() if line.strip()]
        said = lines[-1][:160] if lines else ""
        return f"refused (exit {code.group(1) if code else '?'}: {said!r})"
    other.stop(timeout_s=10)
    return "STARTED (ran beside the first)"


def until_unhealthy(port: int, limit_s: float) -> tuple[Probe, float]:
    """Probe /health every 20 ms until it is not a 200; the last probe and when it came."""
    started = time.monotonic()
    while True:
        last = probe(port, 2.0)
        elapsed = time.monotonic() - started
        if last.status != 200 or elapsed > limit_s:
            return last, elapsed
        time.sleep(0.02)


def delete_database(daemon: DaemonProcess, db: Path) -> tuple[Probe, float, int]:
    """Delete the files; /health's first non-200, when, and a send's status just after."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    unhealthy, after_s = until_unhealthy(daemon.port, 5.0)
    return unhealthy, after_s, send(daemon)[0]


def row_deleted_database(size: Size) -> Row:
    with workdir() as work, FakeOpencode(work / "opencode") as fake:
        fake.add_session(TARGET)
        db = work / "state" / "pigeond.db"
        daemon = DaemonProcess(work, db, opencode_url=fake.url, tick_ms=DEFAULT_TICK_MS)
        with running(daemon):
            first_send = send(daemon)[0]
            with_file = second_daemon(work, db, fake.url)
            unhealthy, after_s, sent = delete_database(daemon, db)
            without_file = second_daemon(work, db, fake.url)
            code = daemon.stop()
    critical = [line for line in daemon.output().splitlines() if line.startswith("critical")]
    names = bool(critical) and str(db) in critical[0]
    ok = (unhealthy.status, sent) == (503, 503) and after_s <= DEFAULT_TICK_MS / 1000 + 0.1
    ok = ok and names and with_file.startswith("refused")
    return Row(
        "5",
        f"send ({first_send}), then <db>, -wal, -shm deleted under a running daemon"
        f" (tick_ms {DEFAULT_TICK_MS}); a second daemon on the path with <db>.lock deleted",
        f"/health {unhealthy.status} {after_s:.3f} s after the delete, then a send: {sent};"
        f" {len(critical)} critical line(s): {critical[0][:200] if critical else '-'!r};"
        f" exit {code}; second daemon, db file still there: {with_file};"
        f" second daemon after the delete: {without_file}",
        "within one tick sends 503 and /health 503; a critical line names the file;"
        " a second daemon is refused",
        yes(ok),
    )


# -- 6. the largest prompt ---------------------------------------------------------------------


@contextlib.contextmanager
def recorded_body_sizes() -> Iterator[list[int]]:
    """The byte size of every request body the stand-in opencode reads, while in the ``with``."""
    sizes: list[int] = []
    original = fake_opencode._Handler._read_body

    def read_body(handler: fake_opencode._Handler) -> bytes:
        raw = original(handler)
        sizes.append(len(raw))
        return raw

    fake_opencode._Handler._read_body = read_body  # type: ignore[method-assign,assignment]
    try:
        yield sizes
    finally:
        fake_opencode._Handler._read_body = original  # type: ignore[method-assign]


@contextlib.contextmanager
def quiet_stand_in() -> Iterator[None]:
    """The stand-in keeps quiet about a client gone mid-answer (pigeond stopped while it
    read a transcript); any other error is still printed."""
    original = fake_opencode._Server.handle_error

    def handle_error(server: fake_opencode._Server, request: Any, address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            original(server, request, address)

    fake_opencode._Server.handle_error = handle_error  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        fake_opencode._Server.handle_error = original  # type: ignore[method-assign]


@dataclass(frozen=True)
class Prompts:
    largest_body: int
    largest_envelope: int
    most_per_prompt: int
    prompts: int
    peak_mib: float  # the daemon's VmHWM


def queue_behind_a_held_prompt(
    daemon: DaemonProcess, fake: FakeOpencode, payloads: list[str]
) -> list[str]:
    """Send a small message, and while its prompt is held, ``payloads``; their msg_ids."""
    assert send(daemon, "blocker")[0] == 202
    wait_until(lambda: TARGET in fake.lookups(), 10, "the first hand-off to start")
    answers = [send(daemon, payload) for payload in payloads]
    assert all(status == 202 for status, _ in answers), [s for s, _ in answers]
    fake.hold_s = 0.05
    return [answer["msg_id"] for _, answer in answers]


def largest_prompt(work: Path, char: str, count: int) -> Prompts:
    with (
        quiet_stand_in(),
        recorded_body_sizes() as sizes,
        FakeOpencode(work / char, hold_s=3.0) as fake,
    ):
        fake.add_session(TARGET)
        db = work / f"{ord(char)}.db"
        daemon = DaemonProcess(work, db, opencode_url=fake.url, extra_args=["--batch-max", "10"])
        with running(daemon):
            ids = queue_behind_a_held_prompt(daemon, fake, [char * BIG_PAYLOAD_CHARS] * count)
            wait_until(lambda: all(prompts_per_message(fake)[i] for i in ids), 120, "delivery")
            peak = memory_mib(daemon.pid, "VmHWM")
        calls = fake.prompt_calls(TARGET)[1:]  # not the blocker's
    parts = [call.body["parts"] for call in calls]
    return Prompts(
        largest_body=max(sizes),
        largest_envelope=max(len(p["text"].encode()) for ps in parts for p in ps),
        most_per_prompt=max(len(ps) for ps in parts),
        prompts=len(calls),
        peak_mib=peak,
    )


def row_batch(size: Size) -> Row:
    with workdir() as work:
        plain = largest_prompt(work, "x", size.batch)
        escaped = largest_prompt(work, "&", size.batch)

    def describe(p: Prompts) -> str:
        return (
            f"largest prompt body {p.largest_body:,} bytes, in {p.prompts} prompts of at most"
            f" {p.most_per_prompt} messages (largest envelope {p.largest_envelope:,} bytes);"
            f" daemon VmHWM {p.peak_mib:.0f} MiB"
        )

    bound = max(BATCH_MAX_BYTES, escaped.largest_envelope) + 16 * 1024
    ok = plain.largest_body <= BATCH_MAX_BYTES + 16 * 1024 and escaped.largest_body <= bound
    return Row(
        "6",
        f"{size.batch} messages of {BIG_PAYLOAD_CHARS:,} chars sent to one target while a"
        " prompt is held; defaults (batch_max 10, batch_max_bytes 1 MiB) but delivery=call;"
        " payload of 'x', then of '&' (5 bytes once escaped in the envelope)",
        f"'x': {describe(plain)}; '&': {describe(escaped)}",
        "the prompt bounded by batch_max_bytes (a single larger message alone), not 13 MB",
        yes(ok),
    )


# -- 7. the disk filling up --------------------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(parent: Path, size: str = "8m") -> Iterator[Path | str]:
    """A tmpfs of ``size`` mounted under ``parent``, or why there is none."""
    if os.geteuid() != 0:
        yield "skipped: needs root for tmpfs"
        return
    mount = parent / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    if done.returncode != 0:
        yield f"skipped: cannot mount a tmpfs: {done.stderr.strip()}"
        return
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], check=False, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False, timeout=30)


def deliver_on_a_full_disk(
    daemon: DaemonProcess, fake: FakeOpencode, disk: Path, size: Size
) -> dict[str, Any]:
    """Healthy hand-offs, then hand-offs while the disk is full, then space freed again."""
    n = size.disk_messages
    healthy_ids = [send(daemon)[1]["msg_id"] for _ in range(n)]
    wait_until(lambda: all(m.verified_at for m in daemon.stored_messages()), 30 + 2 * n, "verified")
    healthy = prompts_per_message(fake)
    fake.hold_s = 1.0
    full_ids = [send(daemon)[1]["msg_id"] for _ in range(n)]
    filler = fill(disk)  # while the first prompt is held
    time.sleep(size.full_s)
    refused = send(daemon)[0]
    during = prompts_per_message(fake)
    filler.unlink()
    wait_until(
        lambda: set(states(daemon, full_ids).values()) == {"handed_off"}, 30 + 3 * n, "late records"
    )
    after = prompts_per_message(fake)
    return {
        "healthy": max(healthy[i] for i in healthy_ids), "during": [during[i] for i in full_ids],
        "after": [after[i] for i in full_ids], "refused": refused,
        "logged": "could not record it" in daemon.output(),
    }  # fmt: skip


def row_full_disk(size: Size) -> Row:
    measured = (
        f"database on an 8 MiB tmpfs; {size.disk_messages} messages delivered healthy, then"
        f" {size.disk_messages} more with the disk filled while the first prompt is held"
        f" (1 s) and kept full {size.full_s:g} s, then freed; prompts counted at the stand-in"
    )
    target = "each message prompted at most once more than with a healthy disk"
    with workdir() as work, small_tmpfs(work) as disk:
        if isinstance(disk, str):
            return Row("7", measured, disk, target, "skipped")
        with FakeOpencode(work / "opencode") as fake:
            fake.add_session(TARGET)
            with running(DaemonProcess(work, disk / "pigeond.db", opencode_url=fake.url)) as d:
                r = deliver_on_a_full_disk(d, fake, disk, size)
    ok = all(n <= r["healthy"] + 1 for n in r["after"])
    return Row(
        "7",
        measured,
        f"prompts per message: healthy max {r['healthy']}; disk full: {r['during']} while"
        f" full, {r['after']} in the end; a send while full: {r['refused']};"
        f" 'could not record it' logged: {r['logged']}",
        target,
        yes(ok),
    )


# -- 8. SIGTERM with a hand-off past stop_timeout_s ----------------------------------------


def row_sigterm(size: Size) -> Row:
    hold_s = 8.0  # the stand-in answers no prompt while the daemon lives
    with (
        workdir() as work,
        quiet_stand_in(),
        FakeOpencode(work / "opencode", hold_s=hold_s) as fake,
    ):
        fake.add_session(TARGET)
        db = work / "state" / "pigeond.db"
        daemon = DaemonProcess(
            work, db, opencode_url=fake.url, extra_args=["--stop-timeout-s", "0.5"]
        )
        with running(daemon):
            msg_id = send(daemon)[1]["msg_id"]
            wait_until(lambda: TARGET in fake.lookups(), 10, "the hand-off to start")
            time.sleep(0.5)  # the prompt is with the stand-in, held
            started = time.monotonic()
            code = daemon.stop(timeout_s=15)
            took = time.monotonic() - started
        state = states(daemon, [msg_id])[msg_id]
        with contextlib.suppress(AssertionError):  # let the held call end before the stand-in
            fake.wait_for_prompts(lambda calls: bool(calls), hold_s + 2)
    output = daemon.output()
    critical = [line for line in output.splitlines() if line.startswith("critical")]
    said = "hand-offs still in flight after 0.5 s" in output
    return Row(
        "8",
        "stand-in opencode never answers the prompt; stop_timeout_s 0.5; a send, then SIGTERM"
        " while its hand-off is in flight",
        f"exit code {code} after {took:.2f} s; critical lines: {len(critical)};"
        f" Traceback in log: {'Traceback' in output}; 'still in flight' logged: {said};"
        f" the message afterwards: {state}",
        "exit 0, no critical line, the message still queued",
        yes(code == 0 and not critical and state == "queued"),
    )


# -- the table -------------------------------------------------------------------------------


def run_row(number: str, measure: Callable[[], Row]) -> Row:
    """One row, timed; an exception becomes the row's figure instead of ending the bench."""
    started = time.monotonic()
    print(f"row {number} ...", file=sys.stderr, flush=True)
    try:
        row = measure()
    except Exception as e:  # the bench goes on with the next row
        row = Row(
            number, "(see the row's function)", f"error: {type(e).__name__}: {e}"[:400], "", "NO"
        )
    print(f"row {number} done in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    return row


def rows(size: Size) -> list[Row]:
    plan: list[tuple[str, Callable[[], Row]]] = [
        ("1", lambda: row_slowloris(size)),
        ("2a", lambda: row_idle(size, fixed=False)),
        ("2b", lambda: row_idle(size, fixed=True)),
        ("3", lambda: row_inbox_memory(size)),
        ("4", lambda: row_write_lock(size)),
        ("5", lambda: row_deleted_database(size)),
        ("6", lambda: row_batch(size)),
        ("7", lambda: row_full_disk(size)),
        ("8", lambda: row_sigterm(size)),
    ]
    return [run_row(number, measure) for number, measure in plan]


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str] | None = None) -> None:
    args = parse(arguments(__doc__, quick="every row at a smaller size", runs=None), argv)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this side holds 2,000 sockets
    table = rows(QUICK if args.quick else FULL)
    print(f"pigeond under abuse, {'quick' if args.quick else 'full'} size")
    print(f"{machine_line()}; open-files hard limit {hard_nofile()}\n")
    head = ("row", "what was measured", "figure", "target", "met")
    cells = [(r.number, cell(r.measured), cell(r.figure), cell(r.target), r.met) for r in table]
    print("\n".join(markdown_table(head, cells)))


if __name__ == "__main__":
    main()
