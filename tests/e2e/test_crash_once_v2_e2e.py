"""Exactly once across a crash, against an opencode 2.x: ``kill -9`` pigeond between an
admission and its record, ten times, during hand-offs to the 2.x stand-in
(:mod:`testkit.opencode_v2_standin`, behind its password), restart it each time, and
count each msg_id among the inputs the stand-in admitted.

The stand-in answers each admission a moment after it admitted the input
(``admit_delay_s``), and pigeond is killed in that moment: the input is admitted, and
pigeond's database has only the intent, the message in doubt.  At the restart it is
looked for in the transcript (where a 2.x writes an input once a turn reads it) and
sent again when not found.  Admission is idempotent by id (the same batch gives the same
id), so a batch sent again is the same input, not a second turn: each msg_id must be in
exactly one admitted input, none lost, however many admission requests carried it.
Rounds alternate ``call`` and ``turn`` delivery and send batches of up to three, as
:mod:`tests.e2e.test_crash_once_e2e` does against the real opencode 1.18.33.
"""

from __future__ import annotations

import functools
import re
import time
from collections import Counter
from pathlib import Path

from testkit.daemon_process import PAIR_BRAKES_OFF, DaemonFactory, DaemonProcess
from testkit.opencode_v2_standin import OpencodeV2StandIn
from testkit.polling import PATIENCE_S, wait_until
from tests.e2e.test_crash_once_e2e import open_rows
from tests.e2e.test_delivery_e2e import post

PASSWORD = "crash-secret"
KILLS = 10
TARGETS = 4
SENT_PER_ROUND = 6
ADMIT_DELAY_S = 0.5  # the window between an admission and its answer, where a kill lands
LOOP_BUDGET_S = 3 * PATIENCE_S  # the loop stops early (fewer kills) rather than run longer
ENVELOPE_ID = re.compile(r'^<swarm_message [^>]*\bmsg_id="([^"]*)"', re.MULTILINE)
ARGS = (
    "--batch-max", "3", "--verify-grace-s", "30", "--verify-interval-s", "0.3",
    "--outage-retry-s", "0.5", "--handoff-timeout-s", "5",
)  # fmt: skip
MODES = ("call", "turn")


def start(factory: DaemonFactory, db: Path, url: str, delivery: str) -> DaemonProcess:
    args = [*ARGS, *PAIR_BRAKES_OFF, "--delivery", delivery]
    return factory.start(db, opencode_url=url, extra_args=args, opencode_password=PASSWORD)


def admission_requests(server: OpencodeV2StandIn) -> int:
    return sum(sum(s.admission_requests.values()) for s in list(server.sessions.values()))


def admitted_beyond(server: OpencodeV2StandIn, count: int) -> bool:
    return admission_requests(server) > count


def inputs_per_msg_id(server: OpencodeV2StandIn) -> Counter[str]:
    """How many admitted inputs (distinct admission ids) carry each msg_id's envelope."""
    counts: Counter[str] = Counter()
    for session in server.sessions.values():
        for admitted in list(session.admitted.values()):
            counts.update(ENVELOPE_ID.findall(admitted.text))
    return counts


def test_kill_9_during_hand_offs_admits_each_message_once(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    """10 kill -9 during hand-offs to a 2.x, each followed by a restart: every msg_id in
    exactly one admitted input, none lost."""
    server = OpencodeV2StandIn(PASSWORD, step_s=0.05, admit_delay_s=ADMIT_DELAY_S)
    with server.serve() as url:
        sessions = [server.create_session().id for _ in range(TARGETS)]
        db = tmp_path / "p.db"
        sent: list[str] = []
        kills = 0
        began = time.monotonic()
        while kills < KILLS and time.monotonic() - began < LOOP_BUDGET_S:
            daemon = start(daemons, db, url, MODES[kills % 2])
            before = admission_requests(server)
            for n in range(SENT_PER_ROUND):
                body = {"from": "ses_crasher", "to": sessions[n % TARGETS],
                        "payload": f"round {kills} message {n}"}  # fmt: skip
                sent.append(post(daemon, body))
            # an input admitted, its answer not given yet: pigeond has not recorded it
            wait_until(functools.partial(admitted_beyond, server, before), PATIENCE_S,
                       "an admission")  # fmt: skip
            daemon.kill()
            kills += 1

        start(daemons, db, url, "turn")
        wait_until(lambda: open_rows(db) == 0, PATIENCE_S, "every message handed off", every_s=0.2)
        for session in server.sessions.values():
            assert session.wait_idle(PATIENCE_S), f"{session.id} still running"
        counts = inputs_per_msg_id(server)
        requests = admission_requests(server)
        inputs = sum(len(s.admitted) for s in server.sessions.values())
        print(
            f"\ncrash loop against 2.x (call and turn delivery in turns): kills={kills}"
            f" messages={len(sent)} inputs={inputs} admission requests={requests}"
            f" seconds={time.monotonic() - began:.0f}"
        )
    assert kills >= KILLS, "the loop ran out of time before enough kills"
    assert [m for m in sent if m not in counts] == [], "lost"
    assert {m: n for m, n in counts.items() if n > 1} == {}, "in two inputs or more"
    assert set(counts) == set(sent)
