"""The inbox on a real pigeond: memory bounded per request and per client, and the readers
(the plugin's ``swarm_read``, ``pigeon inbox``) paging through byte-bounded pages.

The backlog is written straight into the daemon's database before it starts (sending
50 MB through the API would only test sending).  A "stalled reader" asks for the inbox
and then reads nothing but the status line, with a tiny receive buffer, so its answer
stays in the daemon's send buffer: what the daemon holds for it is what it buffered.
Memory is the daemon's peak resident size (``VmHWM`` in ``/proc/<pid>/status``), so no
short-lived peak between two samples is missed.  What /health costs is the daemon's CPU
time from the request to its answer (queued behind the stalled readers' first answers, it
pays for those): unlike the wall time, a busy machine leaves it as it is.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from pigeond.cli.pigeon import main as pigeon
from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.inbox_load import READER, handed_off, inbox_request, stalled_reader, status_line
from testkit.polling import PATIENCE_S
from testkit.process_stats import memory_mib
from tests.plugin_runner import run_tool

pytestmark = pytest.mark.slow

BACKLOG = 200
BACKLOG_PAYLOAD_BYTES = 256 * 1024
STALLED_CLIENTS = 16
PIPELINED = 32  # inbox requests each stalled client sends at once
RSS_LIMIT_MIB = 300
HEALTH_CPU_S = 1.0
# the smallest inbox_max_bytes the config allows; the readers' payloads below make pages
# of one, two and one messages, then an oversized one alone, then the last
SMALL_BUDGET = 1024
READER_PAYLOADS = ["a" * 700, "b" * 40, "c" * 40, "d" * 700, "e" * 2000, "f" * 40]


@pytest.fixture
def backlogged(daemons: DaemonFactory, tmp_path: Path) -> DaemonProcess:
    """A daemon (no opencode) whose READER has 200 messages of 256 KiB handed off."""
    db = tmp_path / "state" / "pigeond.db"
    handed_off(db, ["x" * BACKLOG_PAYLOAD_BYTES] * BACKLOG)
    return daemons.start(db, opencode_url="")


def health_cost_s(daemon: DaemonProcess) -> float:
    """GET /health (answered, ok); the daemon's CPU time from the request to the answer."""
    before = daemon.cpu_s()
    with urllib.request.urlopen(daemon.base_url + "/health", timeout=PATIENCE_S) as answer:
        assert json.loads(answer.read())["ok"] is True
    return daemon.cpu_s() - before


@pytest.fixture
def sockets() -> Iterator[ExitStack]:
    """Closes the test's client sockets before its daemon is stopped."""
    with ExitStack() as stack:
        yield stack


def test_stalled_readers_of_a_large_backlog_cost_bounded_memory(
    backlogged: DaemonProcess, sockets: ExitStack
) -> None:
    """16 clients that ask for limit=1000 of a 50 MB inbox and never read: the daemon's peak
    RSS stays under 300 MiB and /health is answered for under 1 s of its CPU."""
    request = inbox_request(backlogged)
    clients = [
        sockets.enter_context(stalled_reader(backlogged, request)) for _ in range(STALLED_CLIENTS)
    ]
    cost = health_cost_s(backlogged)  # queued behind the 16 inbox requests
    assert all(status_line(c) == b"HTTP/1.1 200" for c in clients)
    assert cost < HEALTH_CPU_S
    assert health_cost_s(backlogged) < HEALTH_CPU_S
    assert memory_mib(backlogged.pid, "VmHWM") < RSS_LIMIT_MIB


def test_pipelining_stalled_readers_hold_one_answer_each(
    backlogged: DaemonProcess, sockets: ExitStack
) -> None:
    """16 clients that each pipeline 32 inbox requests and never read: only their first
    answers are built, so the peak RSS stays under 300 MiB and /health is answered for under
    1 s of the daemon's CPU."""
    requests = inbox_request(backlogged) * PIPELINED
    clients = [
        sockets.enter_context(stalled_reader(backlogged, requests)) for _ in range(STALLED_CLIENTS)
    ]
    cost = health_cost_s(backlogged)
    assert all(status_line(c) == b"HTTP/1.1 200" for c in clients)
    backlogged.wait_idle()  # would it build the pipelined answers, it would have by now
    assert cost < HEALTH_CPU_S
    assert memory_mib(backlogged.pid, "VmHWM") < RSS_LIMIT_MIB


# -- the readers page through byte-bounded pages -------------------------------------------


@pytest.fixture
def small_pages(daemons: DaemonFactory, tmp_path: Path) -> tuple[DaemonProcess, list[str]]:
    """A daemon with inbox_max_bytes = 1024 and READER_PAYLOADS handed off to READER."""
    db = tmp_path / "state" / "pigeond.db"
    ids = handed_off(db, READER_PAYLOADS)
    daemon = daemons.start(db, opencode_url="", extra_args=["--inbox-max-bytes", str(SMALL_BUDGET)])
    return daemon, ids


def test_swarm_read_pages_through_a_byte_bounded_inbox(
    small_pages: tuple[DaemonProcess, list[str]],
) -> None:
    """Following swarm_read's "more waiting ... since=" shows every message once, in order."""
    daemon, ids = small_pages
    env = {"PIGEOND_URL": daemon.base_url, "PIGEOND_TOKEN_FILE": str(daemon.token_file)}
    seen: list[str] = []
    args: dict[str, object] = {}
    reads = 0
    for _ in range(len(ids) + 1):
        run = run_tool("swarm_read", args, replies=None, env=env, session=READER)
        reads += 1
        assert run.ok and run.output is not None, run.error
        seen += re.findall(r"^--- (msg_\w+) · ", run.output, flags=re.MULTILINE)
        footer = run.output.splitlines()[-1]
        more = re.fullmatch(r'more waiting: call swarm_read with since="(\S+)"', footer)
        if more is None:
            assert footer.startswith("no more;"), footer
            break
        args = {"since": more.group(1)}
    assert seen == ids
    assert reads > 1


def test_pigeon_inbox_pages_through_a_byte_bounded_inbox(
    small_pages: tuple[DaemonProcess, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Following ``pigeon inbox``'s next_cursor while it says "more" lists every message once."""
    daemon, ids = small_pages
    env = {"HOME": "/nonexistent", "PIGEOND_TOKEN_FILE": str(daemon.token_file)}
    seen: list[str] = []
    since: list[str] = []
    reads = 0
    for _ in range(len(ids) + 1):
        argv = ["inbox", "--url", daemon.base_url, "--session", READER, *since]
        assert pigeon(argv, env=env) == 0
        reads += 1
        out, err = capsys.readouterr()
        seen += re.findall(r"^(msg_inbox\d+) ", out, flags=re.MULTILINE)  # not the header
        cursor = re.search(r"^next_cursor: (\S+)( \(more)?", err, flags=re.MULTILINE)
        assert cursor is not None, err
        if cursor.group(2) is None:
            break
        since = ["--since", cursor.group(1)]
    assert seen == ids
    assert reads > 1
