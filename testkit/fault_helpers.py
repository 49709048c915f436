"""A real pigeond under faults (tests/test_delivery_faults.py, bench/abuse_table.py):
messages sent to one target, the prompts opencode took for each, their stored states, and
a disk filled to its last byte."""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import re
from pathlib import Path
from typing import Any

import pytest

from testkit.daemon_process import DaemonProcess
from testkit.fake_opencode import FakeOpencode

TARGET = "ses_target"
_MSG_ID = re.compile(r'^<swarm_message [^>]*\bmsg_id="([^"]+)"')


def send(daemon: DaemonProcess, payload: str = "hi") -> tuple[int, dict[str, Any]]:
    """POST /swarm/send to TARGET over TCP with the daemon's token; the status and JSON answer."""
    status, answer = daemon.request_json(
        "POST", "/swarm/send", {"from": "ses_sender", "to": TARGET, "payload": payload}
    )
    return status, answer


def prompts_per_message(opencode: FakeOpencode) -> collections.Counter[str]:
    """How many prompts opencode took for each msg_id (every envelope of every prompt)."""
    counts: collections.Counter[str] = collections.Counter()
    for call in opencode.prompt_calls(TARGET):
        for part in (call.body or {}).get("parts", []):
            match = _MSG_ID.match(part.get("text", ""))
            if match is not None:
                counts[match.group(1)] += 1
    return counts


def states(daemon: DaemonProcess, msg_ids: list[str]) -> dict[str, str]:
    """The stored state of each of ``msg_ids``."""
    by_id = {m.msg_id: m for m in daemon.stored_messages()}
    return {i: by_id[i].state for i in msg_ids}


def fill(disk: Path) -> Path:
    """Write a file until the disk has no byte left; returns it (delete it to free space)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
        with pytest.raises(OSError) as full:
            os.write(fd, b"\0")
        assert full.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler
