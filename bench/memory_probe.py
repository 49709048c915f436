"""What bench/memory_table.py reads while a run goes: the stand-in's count, the daemon's RSS.

Not run by itself.  :class:`Probe` polls the stand-in opencode's count of handed-off
messages every 0.2 s (asyncio, in the sender's event loop, a keep-alive connection)
and reads the daemon's ``/proc/<pid>/status`` as each checkpoint is passed.  With
tracemalloc on (:data:`TRACE_LAUNCHER`), it also has the daemon snapshot its heap at the
baseline and at the end, and :func:`growth_report` tells which lines grew.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import tracemalloc
from pathlib import Path

from bench import handoff_rig as rig
from bench import harness

POLL_S = 0.2
CHECKPOINTS = 20  # after the baseline, evenly up to the last message
TOP_LINES = 15

# pigeond as `python -m pigeond`, with tracemalloc on (5 frames a trace): SIGUSR1 writes a
# snapshot to base.snap, SIGUSR2 to end.snap, both in $BENCH_TRACE_DIR.
TRACE_LAUNCHER = """
import os, runpy, signal, sys, tracemalloc
tracemalloc.start(5)
out = os.environ["BENCH_TRACE_DIR"]
def _dump(name):
    def dump(signum, frame):
        path = os.path.join(out, name)
        tracemalloc.take_snapshot().dump(path + ".tmp")
        os.replace(path + ".tmp", path)
    return dump
signal.signal(signal.SIGUSR1, _dump("base.snap"))
signal.signal(signal.SIGUSR2, _dump("end.snap"))
sys.argv[0] = "pigeond"
runpy.run_module("pigeond", run_name="__main__", alter_sys=True)
"""


# pigeond as `python -m pigeond`, answering SIGUSR1 with one JSON line appended to
# $BENCH_TRACE_DIR/heap.jsonl: what SQLite holds (sqlite3_memory_used), what glibc's
# malloc holds in use and free (mallinfo2), pymalloc's arenas, and Python's object count.
# With $BENCH_MALLOC_TRIM_S, it also calls malloc_trim(0) that often (an experiment).
HEAP_LAUNCHER = """
import ctypes, ctypes.util, gc, json, os, runpy, signal, sys, tempfile
out = os.path.join(os.environ["BENCH_TRACE_DIR"], "heap.jsonl")
lite = ctypes.CDLL(ctypes.util.find_library("sqlite3"))
lite.sqlite3_memory_used.restype = ctypes.c_int64
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
def _arenas():
    with tempfile.TemporaryFile() as f:
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode()
    for line in text.splitlines():
        if line.startswith("# arenas allocated current"):
            return int(line.split("=")[1].replace(",", ""))
    return -1
def _sample(signum, frame):
    m = libc.mallinfo2()
    row = {"sqlite": lite.sqlite3_memory_used(), "malloc_in_use": m.uordblks,
           "malloc_free": m.fordblks, "malloc_mmap": m.hblkhd, "pymalloc_arenas": _arenas(),
           "objects": len(gc.get_objects())}
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\\n")
signal.signal(signal.SIGUSR1, _sample)
trim_s = float(os.environ.get("BENCH_MALLOC_TRIM_S") or 0)
if trim_s > 0:  # an experiment: give malloc's free pages back to the system this often
    from twisted.internet import reactor
    from twisted.internet.task import LoopingCall
    reactor.callWhenRunning(LoopingCall(libc.malloc_trim, 0).start, trim_s)
sys.argv[0] = "pigeond"
runpy.run_module("pigeond", run_name="__main__", alter_sys=True)
"""


def checkpoints(baseline: int, total: int) -> list[int]:
    """The baseline, then every ``total / CHECKPOINTS`` messages, and the last one."""
    step = max(total // CHECKPOINTS, 1)
    points = [baseline, *range(step, total, step), total]
    return sorted({p for p in points if baseline <= p <= total})


class Probe:
    """Samples the daemon's RSS as the stand-in's count passes each checkpoint."""

    def __init__(
        self,
        standin: rig.Standin,
        pid: int,
        points: list[int],
        trace_dir: Path | None = None,
        heap: bool = False,
    ) -> None:
        """``trace_dir``: the daemon runs :data:`TRACE_LAUNCHER` (``heap``: False) or
        :data:`HEAP_LAUNCHER` (``heap``: True) and writes there."""
        self._standin = standin
        self._pid = pid
        self._points = list(points)
        self._trace_dir = trace_dir
        self._heap = heap
        self._start = int(standin.stats()["messages"])  # the priming messages
        self.handed_off = 0
        self.samples: list[tuple[int, dict[str, int]]] = []

    async def watch(self, total: int, limit_s: float) -> None:
        """Until ``total`` messages were handed off; RuntimeError after ``limit_s``."""
        deadline = time.monotonic() + limit_s
        reader, writer = await asyncio.open_connection(rig.HOST, self._standin.port)
        try:
            while self.handed_off < total:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"only {self.handed_off:,} of {total:,} messages handed off within"
                        f" {limit_s:,.0f} s"
                    )
                self.handed_off = await self._count(reader, writer) - self._start
                self._sample_passed()
                await asyncio.sleep(POLL_S)
        finally:
            writer.close()

    async def _count(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
        writer.write(b"GET /_standin/stats HTTP/1.1\r\nHost: stand-in\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        at = head.lower().find(b"content-length:")
        length = int(head[at + 15 : head.index(b"\r\n", at)])
        return int(json.loads(await reader.readexactly(length))["messages"])

    def _sample_passed(self) -> None:
        while self._points and self.handed_off >= self._points[0]:
            self._points.pop(0)
            self.samples.append((self.handed_off, harness.rss_kb(self._pid)))
            if self._heap:
                os.kill(self._pid, signal.SIGUSR1)  # one line of heap.jsonl
            elif self._trace_dir is not None and len(self.samples) == 1:
                os.kill(self._pid, signal.SIGUSR1)  # the baseline's heap snapshot
            if self._trace_dir is not None and not self._heap and not self._points:
                os.kill(self._pid, signal.SIGUSR2)  # the end's


def heap_rows(trace_dir: Path, wait_s: float = 10.0) -> list[dict[str, int]]:
    """The lines of heap.jsonl, one per checkpoint (waiting a little for the last)."""
    path = trace_dir / "heap.jsonl"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if path.exists():
            break
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def growth_report(trace_dir: Path, wait_s: float = 60.0) -> list[str]:
    """The lines whose allocations grew most from base.snap to end.snap, as markdown."""
    end = trace_dir / "end.snap"
    deadline = time.monotonic() + wait_s
    while not end.exists() and time.monotonic() < deadline:
        time.sleep(0.5)  # the daemon writes it (then renames it) when it gets the signal
    before = tracemalloc.Snapshot.load(str(trace_dir / "base.snap"))
    after = tracemalloc.Snapshot.load(str(end))
    lines = ["| grew by (kB) | blocks | where |", "|---|---|---|"]
    for stat in after.compare_to(before, "lineno")[:TOP_LINES]:
        frame = stat.traceback[0]
        where = f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}"
        lines.append(f"| {stat.size_diff / 1024:,.1f} | {stat.count_diff:+,} | {where} |")
    return lines
