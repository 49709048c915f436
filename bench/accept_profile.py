"""``accept_table --profile``: pigeond under the same load with every thread profiled.

A profile says where an accept's time goes, which the figures of bench/accept_table.py
cannot; it runs apart from them because the profiler slows pigeond down.  The load and
the daemon are bench/accept_load.py's and bench/accept_servers.py's.
"""

from __future__ import annotations

import io
import os
import pstats
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from bench.accept_load import Run, Size, measure
from bench.accept_servers import pigeond_daemon, pigeond_server, source_env
from bench.harness import ROOT, Cpus, scratch_dir

PROFILE_TOP = 15

# Runs pigeond as `python -m cProfile -o main.prof -m pigeond ...` would, but profiles the
# reactor (main) thread only inside the measuring window (SIGUSR1 starts, SIGUSR2 stops and
# writes it), and each other thread too over its whole life (cProfile alone sees only the
# thread that started it): a thread's profile is written when it ends, which pigeond's pool
# threads do at a clean stop.
PROFILE_LAUNCHER = """
import cProfile, os, runpy, signal, sys, threading
out = os.environ["BENCH_PROFILE_DIR"]
main_profile = cProfile.Profile()
def _start(signum, frame):
    main_profile.enable()
def _stop(signum, frame):
    main_profile.disable()
    main_profile.dump_stats(os.path.join(out, "main.prof"))
signal.signal(signal.SIGUSR1, _start)
signal.signal(signal.SIGUSR2, _stop)
_run = threading.Thread.run
def _profiled_run(self):
    profile = cProfile.Profile()
    profile.enable()
    try:
        _run(self)
    finally:
        profile.disable()
        profile.dump_stats(os.path.join(out, f"thread-{self.name}.prof"))
threading.Thread.run = _profiled_run
sys.argv[0] = "pigeond"
runpy.run_module("pigeond", run_name="__main__", alter_sys=True)
"""


def profile_pigeond(
    size: Size, cpus: Cpus, keep: Path | None, src: Path | None, unprofiled: Run | None = None
) -> list[str]:
    """One run of pigeond (flood guard at defaults) under the profiler; its report."""
    with scratch_dir("profile") as workdir:
        out = workdir / "profiles"
        out.mkdir()
        env = {"BENCH_PROFILE_DIR": str(out), **source_env(src)}
        daemon = pigeond_daemon(workdir, guard=True, env=env)
        daemon.args[1:3] = ["-c", PROFILE_LAUNCHER]  # instead of "-m pigeond"
        with pigeond_server(daemon, cpus) as server:
            signals = (
                lambda: os.kill(server.pid, signal.SIGUSR1),
                lambda: os.kill(server.pid, signal.SIGUSR2),
            )
            run = measure(server, 1, size, cpus, signals)
        if keep is not None:
            shutil.copytree(out, keep, dirs_exist_ok=True)
        return profile_report(out, run, size, unprofiled)


def profile_report(out: Path, run: Run, size: Size, unprofiled: Run | None) -> list[str]:
    accepted = int(run.rate * size.duration_s)
    lines = [
        "### Profile: pigeond under load, flood guard at defaults, cProfile on every thread",
        "",
        f"{run.rate:,.0f} accepts/s under the profiler ({accepted:,} in the {size.duration_s:g} s"
        f" window; statuses over the run {run.statuses}); server CPU {100 * run.server_cpu:.0f} %"
        f" (main thread {100 * run.server_main_cpu:.0f} %).",
    ]
    if unprofiled is not None and unprofiled.rate > 0:
        main_us = 1e6 * unprofiled.server_main_cpu / unprofiled.rate
        other_us = 1e6 * (unprofiled.server_cpu - unprofiled.server_main_cpu) / unprofiled.rate
        lines.append(
            f"Without the profiler (the median guard-defaults run above): reactor thread"
            f" {main_us:.0f} µs of CPU per accept, other threads {other_us:.0f} µs."
        )
    lines.append("")
    main = out / "main.prof"
    if main.exists():
        stats = pstats.Stats(str(main), stream=io.StringIO())
        lines += breakdown_table(stats, accepted, size.duration_s)
        lines += top_lines("reactor (main) thread, in the window", [main], "cumulative")
        lines += top_lines("reactor (main) thread, in the window", [main], "tottime")
    writers = sorted(out.glob("thread-*writer*.prof"))
    if writers:
        lines += writer_lines(writers, sum(n for s, n in run.statuses.items() if s[0] == "2"))
        lines += top_lines("writer thread, its whole life", writers, "tottime")
    readers = sorted(out.glob("thread-*reader*.prof"))
    if readers:
        lines += top_lines(
            f"{len(readers)} reader threads together, whole life", readers, "tottime"
        )
    return lines


# What the reactor thread does for one accept: (label, file fragment, function, own time?).
# Rows nest (cumulative times): the log line is inside the settling of a commit, and so on.
BREAKDOWN = [
    ("socket reads (recv; includes waiting for the GIL back)", "~",
     "<method 'recv' of '_socket.socket' objects>", True),
    ("HTTP request line + headers (twisted.web, http_limits)", "twisted/web/http.py",
     "lineReceived", False),
    ("access checks: token, Host, Origin (api/access.py)", "pigeond/api/access.py",
     "__call__", False),
    ("body: JSON parse + validation (parse_send_body)", "pigeond/api/send_request.py",
     "parse_send_body", False),
    ("  of which the JSON decoding", "json/decoder.py", "decode", False),
    ("msg_id minting (make_msg_id)", "pigeond/ids.py", "make_msg_id", False),
    ("flood guard (admit: the sender's bucket; the target is counted in the commit)",
     "pigeond/api/flood.py", "admit", False),
    ("hand-offs to the db threads (deferToThreadPool)", "twisted/internet/threads.py",
     "deferToThreadPool", False),
    ("group commit: settling a group (resumes the handlers)", "pigeond/storage/group_commit.py",
     "_settle", False),
    ("the per-accept log line (twisted.logger emit, format, stdout)",
     "twisted/logger/_logger.py", "emit", False),
    ("the answer: headers, body, send (write_answer)", "pigeond/api/web.py", "write_answer",
     False),
    ("pipe writes (the waker; include waiting for the GIL)", "~",
     "<built-in method posix.write>", True),
    ("Deferred machinery (_runCallbacks, own time only)", "twisted/internet/defer.py",
     "_runCallbacks", True),
    ("routes.send itself (every resume, cumulative)", "pigeond/api/routes.py", "send", False),
]  # fmt: skip


def stat_entry(stats: pstats.Stats, fragment: str, name: str) -> tuple[int, float, float] | None:
    """(calls, own time, cumulative time) of the functions ``name`` in files with
    ``fragment`` in their path, summed; None if there is none."""
    table: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
    table = stats.stats  # type: ignore[attr-defined]
    found = [v for (path, _, func), v in table.items() if func == name and fragment in path]
    if not found:
        return None
    return sum(v[1] for v in found), sum(v[2] for v in found), sum(v[3] for v in found)


def breakdown_table(stats: pstats.Stats, accepted: int, window_s: float) -> list[str]:
    total = float(stats.total_tt)  # type: ignore[attr-defined]
    poll = stat_entry(stats, "~", "<method 'poll' of 'select.epoll' objects>")
    busy = total - (poll[1] if poll else 0.0)
    per = 1e6 / max(accepted, 1)
    lines = [
        f"#### Reactor thread per accept, under cProfile ({accepted:,} accepts; the profiler"
        " inflates small calls; rows nest)",
        "",
        "| what | calls per accept | µs per accept | share of the window |",
        "|---|---|---|---|",
        f"| reactor thread busy (window minus epoll wait) | - | {busy * per:,.0f}"
        f" | {100 * busy / window_s:.0f} % |",
    ]
    for label, fragment, name, own in BREAKDOWN:
        entry = stat_entry(stats, fragment, name)
        if entry is None:
            lines.append(f"| {label} | n/a | n/a | n/a |")
            continue
        seconds = entry[1] if own else entry[2]
        lines.append(
            f"| {label} | {entry[0] / max(accepted, 1):.1f} | {seconds * per:,.0f}"
            f" | {100 * seconds / window_s:.0f} % |"
        )
    return [*lines, ""]


def writer_lines(files: list[Path], accepted: int) -> list[str]:
    stats = pstats.Stats(*(str(f) for f in files), stream=io.StringIO())
    total = float(stats.total_tt)  # type: ignore[attr-defined]
    idle = stat_entry(stats, "~", "<method 'acquire' of '_thread.lock' objects>")
    groups = stat_entry(stats, "pigeond/storage/repository.py", "accept_many")
    lines = [
        f"Writer thread, its whole life ({total:.2f} s): waiting for work"
        f" {idle[1] if idle else 0.0:.2f} s, busy {total - (idle[1] if idle else 0.0):.2f} s."
    ]
    if groups is not None and groups[0] > 0:
        lines[0] += (
            f" {groups[0]:,} group commits (accept_many) for {accepted:,} accepts: about"
            f" {accepted / groups[0]:.1f} per commit, {1000 * groups[2] / groups[0]:.2f} ms"
            " per commit (wall time, fsync included)."
        )
    return [*lines, ""]


def top_lines(title: str, files: list[Path], key: str) -> list[str]:
    stream = io.StringIO()
    stats = pstats.Stats(str(files[0]), stream=stream)
    for extra in files[1:]:
        stats.add(str(extra))
    stats.sort_stats(key).print_stats(PROFILE_TOP)
    text = stream.getvalue().replace(str(ROOT) + "/", "")
    text = text.replace(sys.prefix + "/", "").replace(sys.base_prefix + "/", "")
    body = [line for line in text.splitlines() if line.strip() and ".prof" not in line]
    return [f"#### {title}, top {PROFILE_TOP} by {key}", "", "```", *body, "```", ""]
