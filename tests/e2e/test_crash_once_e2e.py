"""Exactly once across a crash: ``kill -9`` pigeond at random points during hand-offs to
the real opencode 1.18.33, restart it each time, and count each msg_id in the transcripts.

A crash between opencode's 2xx to ``prompt_async`` and the database's record of the
hand-off used to send the prompt again at the restart.  The loop below kills pigeond
while messages to several targets are being handed off (rounds alternate ``call``
delivery, where hand-offs follow each other quickly and a kill often lands inside that
window, and ``turn`` delivery, where each waits for the turn before it to end), then
lets the last pigeond deliver the rest, and reads every transcript: every msg_id must be
there once, none twice, none missing.  The figures are printed for the record.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections import Counter
from pathlib import Path

from testkit.daemon_process import PAIR_BRAKES_OFF, DaemonFactory, DaemonProcess
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S, wait_until
from tests.e2e.test_delivery_e2e import batches_in_transcript, post

KILLS = 30
TARGETS = 4
SENT_PER_ROUND = 6
KILL_WITHIN_S = 0.4
LOOP_BUDGET_S = 3 * PATIENCE_S  # the loop stops early (fewer kills) rather than run longer
RECOVERED_LINE = "found in the transcript"  # pigeond's log line for a hand-off not sent again
ARGS = (
    "--batch-max", "3", "--verify-grace-s", "30", "--verify-interval-s", "0.3",
    "--outage-retry-s", "0.5", "--handoff-timeout-s", "5", "--busy-window-s", "1",
    "--status-poll-s", "0.2",
)  # fmt: skip
MODES = ("call", "turn")


def start(factory: DaemonFactory, db: Path, url: str, delivery: str) -> DaemonProcess:
    args = [*ARGS, *PAIR_BRAKES_OFF, "--delivery", delivery]
    return factory.start(db, opencode_url=url, extra_args=args)


def open_rows(db: Path) -> int:
    """Direct messages not handed off yet (queued), as ``sqlite3`` would count them."""
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM swarm_messages WHERE state = 'queued'")
                   .fetchone()[0])  # fmt: skip
    finally:
        conn.close()


def transcript_counts(server: OpencodeServer, sessions: list[str]) -> Counter[str]:
    """How many times each msg_id's envelope opens a user text part, over every session."""
    counts: Counter[str] = Counter()
    for session in sessions:
        for batch in batches_in_transcript(server, session):
            counts.update(batch)
    return counts


def test_kill_9_during_hand_offs_delivers_each_message_once(
    opencode_1_18: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """30 kill -9 during hand-offs, each followed by a restart: 0 duplicates, 0 lost."""
    server = opencode_1_18
    fake_llm.delay_s = 0.05
    directories = [server.dirs[d] for d in ["dirA", "dirB", "dirC", "dirA"][:TARGETS]]
    sessions = [server.create_session(d, f"crash {n}") for n, d in enumerate(directories)]
    db = tmp_path / "p.db"
    rng = random.Random(14)
    sent: list[str] = []
    kills = 0
    started: list[DaemonProcess] = []
    began = time.monotonic()
    while kills < KILLS and time.monotonic() - began < LOOP_BUDGET_S:
        daemon = start(daemons, db, server.url, MODES[kills % 2])
        started.append(daemon)
        for n in range(SENT_PER_ROUND):
            body = {"from": "ses_crasher", "to": sessions[n % TARGETS],
                    "payload": f"round {kills} message {n}"}  # fmt: skip
            sent.append(post(daemon, body))
        time.sleep(rng.uniform(0, KILL_WITHIN_S))  # a random moment to crash
        daemon.kill()
        kills += 1

    started.append(start(daemons, db, server.url, "turn"))
    wait_until(lambda: open_rows(db) == 0, PATIENCE_S, "every message handed off", every_s=0.2)
    for session, directory in zip(sessions, directories, strict=True):
        # its turns have run: every prompt it took (a repeat too) is in its transcript
        server.wait_idle(session, directory, timeout_s=PATIENCE_S)
    counts = transcript_counts(server, sessions)
    duplicates = {m: n for m, n in counts.items() if n > 1}
    lost = [m for m in sent if m not in counts]
    recovered = sum(d.output().count(RECOVERED_LINE) for d in started)
    print(
        f"\ncrash loop (call and turn delivery in turns): kills={kills} messages={len(sent)}"
        f" duplicates={sum(duplicates.values()) - len(duplicates)}"
        f" (msg_ids delivered twice or more: {len(duplicates)}) lost={len(lost)}"
        f" found in a transcript after a restart={recovered}"
        f" seconds={time.monotonic() - began:.0f}"
    )
    assert kills >= 10, "the loop ran out of time before enough kills"
    assert not lost, f"lost: {lost}"
    assert not duplicates, f"delivered more than once: {duplicates}"
    assert set(counts) == set(sent)
