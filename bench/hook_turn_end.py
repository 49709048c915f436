"""What ``pigeon-hook stop`` adds to every Claude Code turn's end when nothing is waiting.

    .venv/bin/python -m bench.hook_turn_end [--starts 40] [--runs 5]

Claude Code runs the Stop hook as a new process at the end of every turn, so its whole
wall time (the process's start and imports included) is time a person waits.  Each start
here is one ``pigeon-hook stop`` with Claude Code's hook JSON on stdin, twice: against a
real pigeond (delivery on, a SQLite file, the session registered: what a person waits,
the figure the goal is for), and against a stand-in of pigeond's turn-end route on a Unix
socket answering ``{"text": null}`` at once (testkit/agent_routes_standin.py): the hook's
own cost, without pigeond's.  The baseline,
measured in the same run and interleaved with it, is ``python -c pass`` with the same
interpreter: what any Python hook costs at least.  Figures are p50 and p90 of the starts
of a run, then the median of the runs; the goal is a p50 of at most 150 ms.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import harness
from testkit.agent_routes_standin import AgentRoutesStandIn
from testkit.daemon_process import DaemonProcess

GOAL_P50_MS = 150.0
HOOK = Path(sys.executable).parent / "pigeon-hook"
SESSION = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
HOOK_INPUT = json.dumps(
    {
        "session_id": SESSION,
        "transcript_path": f"/tmp/projects/-bench/{SESSION}.jsonl",
        "cwd": "/tmp",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
    }
).encode()


def timed(command: list[str], env: dict[str, str]) -> float:
    """Milliseconds from starting ``command`` to its exit (which must be clean and silent)."""
    started = time.perf_counter()
    done = subprocess.run(command, input=HOOK_INPUT, capture_output=True, env=env, check=False)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0 or done.stdout or done.stderr:
        raise SystemExit(f"{command[0]} failed: {done.returncode} {done.stdout!r} {done.stderr!r}")
    return elapsed


def main(argv: list[str] | None = None) -> None:
    parser = harness.arguments(__doc__, quick="10 starts a run", runs=5)
    parser.add_argument("--starts", type=int, default=None, help="starts of each per run (40)")
    args = harness.parse(parser, argv)
    starts = args.starts or (10 if args.quick else 40)
    with harness.scratch_dir("hook") as workdir:
        # delivery on; the opencode URL is never called for a Claude Code session's turn end
        daemon = DaemonProcess(workdir, workdir / "p.db", opencode_url="http://127.0.0.1:9")
        with harness.running(daemon):
            runs = measure(daemon, args.runs, starts)
    show(runs, args.runs, starts)


def measure(
    daemon: DaemonProcess, run_count: int, starts: int
) -> dict[str, list[tuple[float, float]]]:
    """p50 and p90 of each command in each run; the commands take turns within a run."""
    standin = AgentRoutesStandIn()
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    to_daemon = base | {"PIGEOND_URL": daemon.base_url, "PIGEOND_TOKEN": daemon.token}
    to_standin = base | {"PIGEOND_URL": standin.url}
    commands = {
        "python -c pass": ([sys.executable, "-c", "pass"], base),
        "pigeon-hook stop, pigeond": ([str(HOOK), "stop"], to_daemon),
        "pigeon-hook stop, stand-in": ([str(HOOK), "stop"], to_standin),
    }
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    try:
        for command, env in commands.values():  # warm the page cache, register the session
            timed(command, env)
        for _ in range(run_count):
            times: dict[str, list[float]] = {name: [] for name in commands}
            for _ in range(starts):
                for name, (command, env) in commands.items():
                    times[name].append(timed(command, env))
            for name, values in times.items():
                runs[name].append(
                    (harness.percentile(values, 0.5), harness.percentile(values, 0.9))
                )
    finally:
        standin.close()
    return runs


def show(runs: dict[str, list[tuple[float, float]]], run_count: int, starts: int) -> None:
    """The table: the median over runs of each command's p50 and p90, and the verdict."""
    print(f"pigeon-hook stop, nothing waiting: wall time of a start (ms),"
          f" {run_count} runs of {starts} starts, median of the runs")  # fmt: skip
    print(harness.machine_line())
    medians = {}
    cells = []
    for name, figures in runs.items():
        p50 = statistics.median(f[0] for f in figures)
        p90 = statistics.median(f[1] for f in figures)
        medians[name] = p50
        cells.append((name, f"{p50:.1f}", f"{p90:.1f}"))
    table = harness.markdown_table(("command", "p50", "p90"), cells, ("---", "---:", "---:"))
    print("\n".join(table))
    hook, own = medians["pigeon-hook stop, pigeond"], medians["pigeon-hook stop, stand-in"]
    baseline = medians["python -c pass"]
    verdict = "met" if hook <= GOAL_P50_MS else "NOT met"
    print(f"\nratio hook/baseline (p50): {hook / baseline:.2f} against pigeond,"
          f" {own / baseline:.2f} against the stand-in;"
          f" pigeond's turn end adds {hook - own:.1f} ms;"
          f" goal p50 <= {GOAL_P50_MS:g} ms (against pigeond): {verdict}")  # fmt: skip


if __name__ == "__main__":
    main()
