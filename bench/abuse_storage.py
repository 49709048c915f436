"""Rows 3 to 5 of bench/abuse_table.py: the database under pressure, an inbox too large
to hold in memory for clients that never read, SQLite's write lock held by another
process, and the database file deleted under the running daemon.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import threading
import time
import urllib.request
from pathlib import Path

from bench.abuse_probes import Probe, Row, Sampler, Size, probe, summary, tally, workdir, yes
from bench.harness import percentile, running
from pigeond.storage.schema import DEFAULT_BUSY_TIMEOUT_MS
from testkit.daemon_process import DaemonProcess, DaemonStartError
from testkit.fake_opencode import FakeOpencode
from testkit.fault_helpers import TARGET, send
from testkit.inbox_load import READER, handed_off, inbox_request, stalled_reader, status_line
from testkit.process_stats import memory_mib

DEFAULT_TICK_MS = 500
INBOX_PAYLOAD_BYTES = 256 * 1024
RSS_LIMIT_MIB = 300
BUSY_TIMEOUT_S = DEFAULT_BUSY_TIMEOUT_MS / 1000


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
