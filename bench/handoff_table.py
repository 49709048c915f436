"""Hand-off at scale: pigeond accepting *and* handing off over 100 targets.

    .venv/bin/python -m bench.handoff_table [--quick] [--runs N] [--baseline-src DIR]

Each run starts a fresh pigeond (its delivery defaults: ``turn`` delivery, batches of
up to 10, tick 500 ms; the flood guard off, so that 1,000 msg/s from 10 senders is not
throttled) and a fresh stand-in opencode (bench/standin_opencode.py, its own process),
primes every target with one message, then runs these phases in order:

1. **idle**: messages at 20 msg/s, round robin over the 100 targets, so each target
   gets one every 5 s and is idle when it comes (checked: the previous hand-off to it
   had arrived before the send);
2. **paced**: 1,000 msg/s (open loop) to random targets, the stand-in answering at once
   (204 at once, the turn's idle event right after it);
3. **held**: the same load, the stand-in holding each 204 for 5 ms and each turn for
   5 ms more, so that two hand-offs to one target *could* overlap and be seen to;
4. **flat out**: a fixed count of messages as fast as 64 connections get answers: the rate
   pigeond sustains, accepted and handed off (first send to last hand-off).

The stand-in counts, for every target, prompts that arrived while that target still
had a call (no 204 yet) or a turn (no idle event yet) in flight, and the most in
flight at once.  accept -> handed_off is each message's ``handed_off_at -
created_at`` from the daemon's database (ms: from the send being parsed, before its
group commit, to opencode's 204 coming back); 202 -> prompt at opencode is the
stand-in's arrival time minus the sender's time of the 202 (CLOCK_MONOTONIC, both).

Pass or fail, against issue 13: flat out at least 1,000 msg/s accepted and handed off;
the paced phase kept up (its last hand-off within 1 s of its last send being due); never
more than one hand-off in flight for a target, in any phase; on idle targets accept ->
handed_off p50 <= 5 ms and p99 <= 20 ms.  The rest is shown for reading the figures.

``--baseline-src DIR`` also runs pigeond from another source tree (through ``PYTHONPATH``,
e.g. an older commit exported with ``git archive COMMIT pigeond | tar -x -C DIR``) in
turns with this checkout, run for run (which goes first alternates), and adds a table of
the flat-out figures of both and their ratio: a before/after against the same machine
minute.

Bounded: every phase has a message count and a time limit that fails loudly; only
127.0.0.1.  Each figure is the median of ``--runs`` (at least 3) runs with its range.
``--quick`` is a smoke check of under a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import handoff_rig as rig
from bench import harness
from bench.harness import Cpus, Sizes, arguments, parse, progress, scratch_dir, sized, take_machine

RECORD = 200_000  # arrivals the stand-in keeps per phase: more than any phase sends
HELD_MS = 5.0
# A paced phase kept up when its last message was handed off within this of being due:
# a daemon that falls behind ends seconds late (its backlog grows all phase long).
KEPT_UP_MS = 1000
IDLE_RATE = 20.0


@dataclass(frozen=True)
class Size(Sizes):
    idle_messages: int = 300  # 15 s at 20 msg/s
    paced_s: float = 20.0
    held_s: float = 10.0
    max_messages: int = 15_000
    rate: float = 1000.0


QUICK = Size(idle_messages=40, paced_s=3.0, held_s=2.0, max_messages=3000)


@dataclass
class Phase:
    """What one phase sent, what arrived at the stand-in, and what the database says."""

    sent: list[rig.Sent]
    arrivals: dict[str, float]
    rows: dict[str, rig.Row]
    stats: dict[str, Any]  # the stand-in's counts at the phase's end (overlaps: this phase)
    prompts: int  # prompts in this phase
    daemon_cpu_s: float
    standin_cpu_s: float

    @property
    def ok(self) -> list[rig.Sent]:
        return [s for s in self.sent if s.msg_id is not None]

    @property
    def start(self) -> float:
        return min(s.due for s in self.sent)

    @property
    def wall_s(self) -> float:
        return max(self.arrivals.values()) - self.start

    def accepted_per_s(self) -> float:
        return len(self.ok) / (max(s.answered for s in self.ok) - self.start)

    def handed_off_per_s(self) -> float:
        return len(self.arrivals) / self.wall_s

    def accept_to_hand_off_ms(self) -> list[float]:
        return [
            float(r.handed_off_at - r.created_at)
            for r in self.rows.values()
            if r.handed_off_at is not None
        ]

    def answer_to_prompt_ms(self) -> list[float]:
        return [1000 * (self.arrivals[s.msg_id] - s.answered) for s in self.ok
                if s.msg_id in self.arrivals]  # fmt: skip


@dataclass
class Run:
    figures: dict[str, float] = field(default_factory=dict)


class Rig:
    """One run's daemon and stand-in, and how a phase is driven through them."""

    def __init__(self, daemon: rig.BenchDaemon, standin: rig.Standin) -> None:
        self.daemon = daemon
        self.standin = standin

    def phase(
        self, plan: rig.Plan, count: int, *, hold_ms: float = 0, connections: int = 64
    ) -> Phase:
        self.standin.phase(hold_ms, hold_ms)
        before = self.standin.stats()
        cpu_before = harness.cpu_seconds(self.daemon.pid)
        limit_s = 60 + count / 200  # far beyond any rate seen; a stuck daemon fails loudly
        sent = asyncio.run(
            rig.send_plan(self.daemon.port, self.daemon.token, plan,
                          connections=connections, limit_s=limit_s)
        ).sent  # fmt: skip
        ok = sum(s.msg_id is not None for s in sent)
        after = rig.wait_for_messages(self.standin, before["messages"] + ok, limit_s)
        cpu_after = harness.cpu_seconds(self.daemon.pid)
        arrivals = self.standin.received()
        rows = rig.read_rows(Path(self.daemon.db), [s.msg_id for s in sent if s.msg_id])
        return Phase(
            sent, arrivals, rows, after, after["prompts"] - before["prompts"],
            cpu_after - cpu_before, after["cpu_s"] - before["cpu_s"],
        )  # fmt: skip


def random_targets(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [rig.target_name(rng.randrange(rig.TARGETS)) for _ in range(count)]


def idle_figures(phase: Phase, run: Run) -> None:
    """Latency on idle targets; how many sends found their target not idle."""
    by_target: dict[str, list[rig.Sent]] = {}
    for s in phase.ok:
        by_target.setdefault(s.target, []).append(s)
    busy = 0
    for sends in by_target.values():
        for prev, this in itertools.pairwise(sends):
            busy += phase.arrivals.get(prev.msg_id or "", float("inf")) >= this.sent
    latency, wire = phase.accept_to_hand_off_ms(), phase.answer_to_prompt_ms()
    run.figures |= {
        "idle_p50": harness.percentile(latency, 0.5),
        "idle_p99": harness.percentile(latency, 0.99),
        "idle_wire_p50": harness.percentile(wire, 0.5),
        "idle_wire_p99": harness.percentile(wire, 0.99),
        "idle_not_idle": busy, "idle_errors": len(phase.sent) - len(phase.ok),
    }  # fmt: skip


def load_figures(phase: Phase, run: Run, key: str) -> None:
    """Rates, latency across the whole phase, overlap and CPU of a loaded phase."""
    latency = phase.accept_to_hand_off_ms()
    last_due = max(s.due for s in phase.sent)
    run.figures |= {
        f"{key}_accepted": phase.accepted_per_s(),
        f"{key}_handed_off": phase.handed_off_per_s(),
        f"{key}_p50": harness.percentile(latency, 0.5),
        f"{key}_p99": harness.percentile(latency, 0.99),
        f"{key}_lag_ms": 1000 * (max(phase.arrivals.values()) - last_due),
        f"{key}_max_in_flight": phase.stats["max_in_flight"],
        f"{key}_overlaps": phase.stats["call_overlaps"] + phase.stats["turn_overlaps"],
        f"{key}_daemon_cpu": phase.daemon_cpu_s / phase.wall_s,
        f"{key}_standin_cpu": phase.standin_cpu_s / phase.wall_s,
        f"{key}_per_prompt": len(phase.arrivals) / max(phase.prompts, 1),
        f"{key}_sender_late_p99": 1000 * harness.percentile([s.sent - s.due for s in phase.sent],
                                                        0.99),
        f"{key}_errors": len(phase.sent) - len(phase.ok),
        f"{key}_lost": len(phase.ok) - len(phase.arrivals),
    }  # fmt: skip


def one_run(size: Size, cpus: Cpus, seed: int, src: Path | None = None) -> Run:
    run = Run()
    env = None if src is None else {"PYTHONPATH": str(src)}
    with (
        scratch_dir("table") as workdir,
        rig.standin(workdir, cpus, record=RECORD) as standin,
        rig.daemon(workdir, standin.url, cpus, env=env) as daemon,
    ):
        targets = [rig.target_name(k) for k in range(rig.TARGETS)]
        rig.prime(daemon.port, daemon.token, standin, targets)
        bench = Rig(daemon, standin)
        idle = [targets[i % rig.TARGETS] for i in range(size.idle_messages)]
        phase = bench.phase(rig.paced(time.monotonic(), IDLE_RATE, idle), len(idle))
        idle_figures(phase, run)
        paced = random_targets(int(size.rate * size.paced_s), seed)
        phase = bench.phase(rig.paced(time.monotonic(), size.rate, paced), len(paced))
        load_figures(phase, run, "paced")
        held = random_targets(int(size.rate * size.held_s), seed + 1)
        phase = bench.phase(
            rig.paced(time.monotonic(), size.rate, held), len(held), hold_ms=HELD_MS
        )
        load_figures(phase, run, "held")
        flat_out = random_targets(size.max_messages, seed + 2)
        phase = bench.phase(rig.paced(time.monotonic(), float("inf"), flat_out), len(flat_out))
        load_figures(phase, run, "max")
    return run


# -- the table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    keys: tuple[str, ...]  # one key, or several shown "a / b"
    fmt: str
    target: str = "-"
    passes: Callable[[list[float]], bool] | None = None  # on the medians of the keys


def at_least(bound: float) -> Callable[[list[float]], bool]:
    return lambda medians: medians[0] >= bound


def at_most(bound: float) -> Callable[[list[float]], bool]:
    return lambda medians: max(medians) <= bound


def rows(size: Size) -> list[Row]:
    rate = f"{size.rate:,.0f} msg/s"
    return [
        Row(f"flat out ({size.max_messages:,} msgs, 64 connections): accepted msg/s",
            ("max_accepted",), "{:,.0f}", ">= 1,000", at_least(1000)),
        Row("flat out: handed off msg/s (first send to last hand-off)",
            ("max_handed_off",), "{:,.0f}", ">= 1,000", at_least(1000)),
        Row(f"paced {rate} ({size.paced_s:g} s), stand-in at once: accepted / handed off"
            " msg/s", ("paced_accepted", "paced_handed_off"), "{:,.0f}", f"{rate} offered"),
        Row(f"paced: kept up with {rate}? last hand-off after the last send was due (ms)",
            ("paced_lag_ms",), "{:,.0f}", f"<= {KEPT_UP_MS:,} ms", at_most(KEPT_UP_MS)),
        Row(f"held ({size.held_s:g} s at {rate}, 204 and turn {HELD_MS:g} ms each):"
            " accepted / handed off msg/s", ("held_accepted", "held_handed_off"), "{:,.0f}",
            f"{rate} offered"),
        Row("most hand-offs in flight for one target (paced / held / flat out)",
            ("paced_max_in_flight", "held_max_in_flight", "max_max_in_flight"), "{:.0f}",
            "<= 1", at_most(1)),
        Row("prompts that came while their target had one in flight (paced / held / flat out)",
            ("paced_overlaps", "held_overlaps", "max_overlaps"), "{:.0f}", "0", at_most(0)),
        Row("accept -> handed_off, idle targets, p50 (ms)", ("idle_p50",), "{:.1f}", "<= 5",
            at_most(5)),
        Row("accept -> handed_off, idle targets, p99 (ms)", ("idle_p99",), "{:.1f}", "<= 20",
            at_most(20)),
        Row("202 -> prompt at opencode, idle targets, p50 / p99 (ms)",
            ("idle_wire_p50", "idle_wire_p99"), "{:.2f}"),
        Row(f"accept -> handed_off, whole paced {rate} run, p50 / p99 (ms)",
            ("paced_p50", "paced_p99"), "{:.1f}", "(idle: 5 / 20)"),
        Row("accept -> handed_off, held run, p50 / p99 (ms)", ("held_p50", "held_p99"),
            "{:.1f}"),
        Row("accept -> handed_off, flat out, p50 / p99 (ms)", ("max_p50", "max_p99"),
            "{:,.0f}"),
        Row("messages per prompt (batching): paced / held / flat out",
            ("paced_per_prompt", "held_per_prompt", "max_per_prompt"), "{:.2f}"),
        Row("pigeond CPU, one core = 1.00: paced / held / flat out",
            ("paced_daemon_cpu", "held_daemon_cpu", "max_daemon_cpu"), "{:.2f}"),
        Row("stand-in CPU: paced / flat out", ("paced_standin_cpu", "max_standin_cpu"),
            "{:.2f}"),
        Row("sender late vs its plan, p99 (ms): paced / held",
            ("paced_sender_late_p99", "held_sender_late_p99"), "{:.2f}"),
        Row("non-202 answers / accepted never handed off (all phases)",
            ("all_errors", "all_lost"), "{:.0f}", "0 / 0", at_most(0)),
    ]  # fmt: skip


def table(runs: list[Run], size: Size) -> list[str]:
    for run in runs:
        f = run.figures
        f["all_errors"] = sum(f[f"{k}_errors"] for k in ("idle", "paced", "held", "max"))
        f["all_lost"] = sum(f[f"{k}_lost"] for k in ("paced", "held", "max"))
    lines = ["| figure | median (range) of runs | target | pass |", "|---|---|---|---|"]
    for row in rows(size):
        values = [[r.figures[k] for r in runs] for k in row.keys]
        medians = [statistics.median(v) for v in values]
        shown = " / ".join(harness.median_range(v, row.fmt) for v in values)
        verdict = "-" if row.passes is None else ("pass" if row.passes(medians) else "**FAIL**")
        lines.append(f"| {row.label} | {shown} | {row.target} | {verdict} |")
    return lines


def notes(size: Size, runs: list[Run]) -> list[str]:
    not_idle = sum(r.figures["idle_not_idle"] for r in runs)
    return [
        f"- {len(runs)} runs, each a fresh pigeond and stand-in; pigeond with its delivery"
        " defaults (`--delivery turn --batch-max 10`, tick 500 ms, info log to a pipe) and"
        " the flood guard off (`" + " ".join(harness.GUARD_OFF) + "`): 10 senders at 1,000"
        " msg/s would meet its defaults (10 msg/s per sender).",
        f"- idle: {size.idle_messages} messages at {IDLE_RATE:g} msg/s round robin over"
        f" {rig.TARGETS} targets (one per target every {rig.TARGETS / IDLE_RATE:g} s);"
        f" sends that found their target's previous hand-off not yet arrived: {not_idle:.0f}.",
        "- every phase: 64 keep-alive connections from this process (asyncio);"
        f" {rig.SENDERS} senders, {rig.PAYLOAD_BYTES}-byte payloads; paced, held and flat out"
        f" to random targets of {rig.TARGETS}.  Idle, paced and held are open loop (a send"
        " goes when due, on a free connection; 'sender late' shows it kept the pace);"
        " flat out sends each connection's next message when its 202 came.",
        "- accept -> handed_off: `handed_off_at - created_at` (ms) of every message of the"
        " phase in swarm_messages; 202 -> prompt: stand-in arrival minus the sender's 202"
        " (negative when the prompt went out before the 202 was read).",
        "- in flight, as the stand-in sees it: from a prompt's arrival until its 204 is"
        " written (call) and until its turn's idle event is written (turn).",
    ]


BASELINE_KEYS = (
    ("flat out: handed off msg/s", "max_handed_off", "{:,.0f}"),
    ("flat out: accepted msg/s", "max_accepted", "{:,.0f}"),
    ("pigeond CPU, flat out (one core = 1.00)", "max_daemon_cpu", "{:.2f}"),
    ("pigeond CPU per message handed off, flat out (µs)", "max_cpu_us", "{:,.0f}"),
    ("messages per prompt, flat out", "max_per_prompt", "{:.2f}"),
)


def baseline_table(runs: list[Run], baseline: list[Run], src: Path) -> list[str]:
    """This checkout against ``src``, run for run in turns: medians, ranges, ratios."""
    lines = [f"\nAgainst `{src}` (pigeond from that tree), in turns with this checkout:\n",
             "| figure | this checkout | baseline | ratio (range, run by run) |",
             "|---|---|---|---|"]  # fmt: skip
    for run in [*runs, *baseline]:  # CPU per message: what a loaded machine's share hides least
        run.figures["max_cpu_us"] = (
            1e6 * run.figures["max_daemon_cpu"] / run.figures["max_handed_off"]
        )
    for label, key, fmt in BASELINE_KEYS:
        ours, theirs = [r.figures[key] for r in runs], [r.figures[key] for r in baseline]
        ratios = [a / b for a, b in zip(ours, theirs, strict=True) if b]
        lines.append(
            f"| {label} | {harness.median_range(ours, fmt)} | {harness.median_range(theirs, fmt)}"
            f" | {statistics.median(ours) / statistics.median(theirs):.2f}x"
            f" ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(__doc__, quick="a smoke check under a minute")
    parser.add_argument(
        "--baseline-src", type=Path, help="also run pigeond from this source tree, in turns"
    )
    return parse(parser, argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    size = sized(args, Size(), QUICK)
    cpus, load_at_start = take_machine()
    src = args.baseline_src.resolve() if args.baseline_src else None
    runs: list[Run] = []
    baseline: list[Run] = []
    for i in range(size.runs):
        order = [None, src] if src is None or i % 2 == 0 else [src, None]
        for tree in order if src is not None else [None]:
            started = time.monotonic()
            run = one_run(size, cpus, seed=1000 * i, src=tree)
            (runs if tree is None else baseline).append(run)
            f = run.figures
            progress(f"run {i + 1}/{size.runs}{'' if tree is None else ' (baseline)'}"
                     f" ({time.monotonic() - started:.0f} s): flat out"
                     f" {f['max_handed_off']:,.0f} msg/s, idle p50/p99 {f['idle_p50']:.0f}/"
                     f"{f['idle_p99']:.0f} ms")  # fmt: skip
    print(
        "\n".join(harness.header("Hand-off at scale", [harness.machine_line(cpus)], load_at_start))
    )
    print("\n".join(table(runs, size)) + "\n")
    print("\n".join(notes(size, runs)))
    if src is not None:
        print("\n".join(baseline_table(runs, baseline, src)))


if __name__ == "__main__":
    main()
