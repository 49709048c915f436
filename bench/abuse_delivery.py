"""Rows 6 to 8 of bench/abuse_table.py: delivery to opencode under strain, the largest
prompt a queue of big messages makes, the disk filling up while delivering, and SIGTERM
while a hand-off outlasts stop_timeout_s.  A stand-in opencode (testkit/fake_opencode.py)
takes the prompts.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import testkit.fake_opencode as fake_opencode
from bench.abuse_probes import Row, Size, workdir, yes
from bench.harness import running
from testkit.daemon_process import DaemonProcess
from testkit.fake_opencode import FakeOpencode
from testkit.fault_helpers import TARGET, fill, prompts_per_message, send, states
from testkit.polling import wait_until
from testkit.process_stats import memory_mib

BATCH_MAX_BYTES = 1024 * 1024  # pigeond's default batch_max_bytes
BIG_PAYLOAD_CHARS = 262_000  # "262 KB": as large as one send's 256 KiB body allows


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
