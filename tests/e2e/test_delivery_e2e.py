"""Delivery through pigeond against the real opencode serve (1.15.4 and 1.18.33).

What the agent sees is checked in opencode's own transcript, and when turns
ran is checked on the fake LLM's timeline.
"""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
import threading
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testkit.completion import Completion
from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S, wait_until

RANK = {"urgent": 0, "normal": 1, "low": 2}
OPENING_ID = re.compile(r'^<swarm_message [^>]*\bmsg_id="([^"]*)"')
TURN_ARGS = (
    "--delivery", "turn", "--batch-max", "10", "--busy-window-s", "3",
    "--verify-grace-s", "30", "--verify-interval-s", "0.3", "--outage-retry-s", "0.5",
    "--status-poll-s", "0.2", "--handoff-timeout-s", "5",
)  # fmt: skip


def start_pigeond(
    factory: DaemonFactory, db: Path, opencode_url: str, *extra: str
) -> DaemonProcess:
    return factory.start(db, opencode_url=opencode_url, extra_args=[*TURN_ARGS, *extra])


def post(daemon: DaemonProcess, body: dict[str, Any]) -> str:
    request = urllib.request.Request(
        daemon.base_url + "/swarm/send", data=json.dumps(body).encode(), method="POST",
        headers=daemon.auth_headers,
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=PATIENCE_S) as response:
        assert response.status == 202
        return str(json.loads(response.read())["msg_id"])


def send_all(daemon: DaemonProcess, target: str, plan: Sequence[Sequence[str]]) -> dict[str, str]:
    """Each inner list is one sender's priorities, sent in order; all senders at once."""
    sent: dict[str, str] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(len(plan))

    def sender(index: int, priorities: Sequence[str]) -> None:
        barrier.wait(timeout=PATIENCE_S)
        for n, priority in enumerate(priorities):
            body = {"from": f"ses_sender{index}", "to": target, "priority": priority,
                    "payload": f"task {n} from sender {index}"}  # fmt: skip
            msg_id = post(daemon, body)
            with lock:
                sent[msg_id] = priority

    threads = [threading.Thread(target=sender, args=(i, p)) for i, p in enumerate(plan)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=PATIENCE_S)
    assert len(sent) == sum(len(p) for p in plan)
    return sent


def batches_in_transcript(server: OpencodeServer, session: str) -> list[list[str]]:
    """msg_ids of the envelopes of each user message (= each prompt), in transcript order."""
    batches = []
    for message in server.messages(session):
        if message["info"].get("role") != "user":
            continue
        ids = [
            m.group(1)
            for part in message["parts"]
            if part.get("type") == "text" and not part.get("synthetic")
            if (m := OPENING_ID.match(str(part.get("text", "")))) is not None
        ]
        if ids:
            batches.append(ids)
    return batches


def wait_delivered(
    server: OpencodeServer, session: str, ids: Sequence[str], directory: str
) -> None:
    def all_in() -> bool:
        seen = {i for batch in batches_in_transcript(server, session) for i in batch}
        return set(ids) <= seen

    wait_until(all_in, PATIENCE_S, f"{len(ids)} messages in {session}'s transcript", every_s=0.1)
    server.wait_idle(session, directory, timeout_s=PATIENCE_S)


def accept_order(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return {m: s for m, s in conn.execute("SELECT msg_id, accept_seq FROM swarm_messages")}
    finally:
        conn.close()


def rows(db: Path) -> dict[str, tuple[str, int, int | None, str | None]]:
    conn = sqlite3.connect(db)
    try:
        query = "SELECT msg_id, state, attempts, verified_at, last_error FROM swarm_messages"
        return {m: (s, a, v, e) for m, s, a, v, e in conn.execute(query)}
    finally:
        conn.close()


def session_completions(llm: FakeLLM, session: str) -> list[Completion]:
    return sorted(llm.completions("main", session), key=lambda c: c.start)


def first_completion_with(completions: Sequence[Completion], msg_id: str) -> Completion:
    return next(c for c in completions if any(f'msg_id="{msg_id}"' in t for t in c.user_texts))


def test_concurrent_senders_one_turn_at_a_time(
    opencode_any: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """Several senders at once: no overlapping turns, each message once, batches in order."""
    server, directory = opencode_any, opencode_any.dirs["dirA"]
    session = server.create_session(directory, "concurrent")
    db = tmp_path / "p.db"
    daemon = start_pigeond(daemons, db, server.url)
    plan = [["low", "urgent", "normal"], ["normal", "low", "urgent"],
            ["urgent", "normal", "low"], ["normal", "normal", "urgent"]]  # fmt: skip
    sent = send_all(daemon, session, plan)
    wait_delivered(server, session, list(sent), directory)

    batches = batches_in_transcript(server, session)
    delivered = [i for batch in batches for i in batch]
    assert sorted(delivered) == sorted(sent), "every message exactly once"
    assert fake_llm.max_concurrent("main", session) == 1, "one turn at a time"
    accepted = accept_order(db)
    for batch in batches:
        assert batch == sorted(batch, key=lambda i: (RANK[sent[i]], accepted[i]))
    assert len(session_completions(fake_llm, session)) == len(batches)


def test_backlog_goes_out_in_priority_then_fifo_order(
    opencode_any: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """A backlog built while delivery was off reaches the transcript urgent, normal, low."""
    server, directory = opencode_any, opencode_any.dirs["dirB"]
    session = server.create_session(directory, "backlog")
    db = tmp_path / "p.db"
    held = start_pigeond(daemons, db, "")
    plan = [["low", "normal"], ["urgent", "low"], ["normal", "urgent"]]
    sent = send_all(held, session, plan)
    assert held.stop() == 0

    start_pigeond(daemons, db, server.url, "--batch-max", "4")
    wait_delivered(server, session, list(sent), directory)
    accepted = accept_order(db)
    expected = sorted(sent, key=lambda i: (RANK[sent[i]], accepted[i]))
    batches = batches_in_transcript(server, session)
    assert [i for batch in batches for i in batch] == expected
    assert [len(b) for b in batches] == [4, 2]
    assert fake_llm.max_concurrent("main", session) == 1


def test_hand_off_waits_for_the_running_turn(
    opencode_1_18: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """Messages sent during a turn are handed off only after it ended, each in its own turn."""
    server, directory = opencode_1_18, opencode_1_18.dirs["dirC"]
    session = server.create_session(directory, "turns")
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url, "--batch-max", "1")
    with fake_llm.turns_held():
        first = post(daemon, {"from": "ses_a", "to": session, "payload": "first"})
        fake_llm.wait_for(lambda llm: llm.in_flight("main") > 0, PATIENCE_S, "the first turn")
        later = [post(daemon, {"from": "ses_b", "to": session, "payload": f"later {n}"})
                 for n in range(2)]  # fmt: skip
    wait_delivered(server, session, [first, *later], directory)

    turns = session_completions(fake_llm, session)
    assert len(turns) == 3, "each message its own completion"
    for earlier, next_turn in itertools.pairwise(turns):
        assert next_turn.start >= earlier.end, "no turn starts before the previous one ended"
    first_turn = first_completion_with(turns, first)
    for msg_id in later:
        assert first_completion_with(turns, msg_id).start >= first_turn.end


def test_backlog_during_a_turn_costs_one_more_turn(
    opencode_1_18: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """With batching, messages that wait out a turn go over together: one more turn."""
    server, directory = opencode_1_18, opencode_1_18.dirs["dirD"]
    session = server.create_session(directory, "batching")
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url)
    with fake_llm.turns_held():
        first = post(daemon, {"from": "ses_a", "to": session, "payload": "first"})
        fake_llm.wait_for(lambda llm: llm.in_flight("main") > 0, PATIENCE_S, "the first turn")
        later = [post(daemon, {"from": "ses_b", "to": session, "payload": f"later {n}"})
                 for n in range(3)]  # fmt: skip
    wait_delivered(server, session, [first, *later], directory)
    assert batches_in_transcript(server, session) == [[first], later]
    assert len(session_completions(fake_llm, session)) == 2


def test_call_mode_gets_fewer_replies_than_messages(
    opencode_1_18: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """Without turn-awareness opencode merges prompts sent while busy: fewer replies."""
    server, directory = opencode_1_18, opencode_1_18.dirs["dirA"]
    session = server.create_session(directory, "call mode")
    db = tmp_path / "p.db"
    daemon = start_pigeond(daemons, db, server.url, "--delivery", "call", "--batch-max", "1")
    with fake_llm.turns_held():
        first = post(daemon, {"from": "ses_a", "to": session, "payload": "first"})
        fake_llm.wait_for(lambda llm: llm.in_flight("main") > 0, PATIENCE_S, "the first turn")
        later = [post(daemon, {"from": "ses_b", "to": session, "payload": f"later {n}"})
                 for n in range(3)]  # fmt: skip
        # call delivery hands them off at once, during the turn
        wait_until(lambda: all(rows(db)[m][0] == "handed_off" for m in later), PATIENCE_S,
                   "the later ones handed off")  # fmt: skip
    wait_delivered(server, session, [first, *later], directory)
    assert len(session_completions(fake_llm, session)) < 4


def test_outage_loses_nothing_and_spends_no_attempts(
    opencode_1_18: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """opencode stopped, messages sent, retries pass, opencode back: all delivered, 0 attempts."""
    server, directory = opencode_1_18, opencode_1_18.dirs["dirB"]
    session = server.create_session(directory, "outage")
    db = tmp_path / "p.db"
    daemon = start_pigeond(daemons, db, server.url, "--log-level", "debug")
    server.stop()
    try:
        sent = [post(daemon, {"from": "ses_a", "to": session, "payload": f"during outage {n}"})
                for n in range(3)]  # fmt: skip
        # five tries, each met by the outage (a debug line each): none may spend an attempt
        tried = f"to {session} wait for opencode ("
        wait_until(lambda: daemon.output().count(tried) >= 5, PATIENCE_S,
                   "five tries during the outage")  # fmt: skip
        said = f"opencode at {server.url} unreachable ("
        assert daemon.output().count(said) == 1, "the outage is said once, as it starts"
        held = rows(db)
        assert all(held[m][0] == "queued" and held[m][1] == 0 for m in sent), held
        assert all(held[m][3] for m in sent[:1]), "the head of the queue says why it waits"
    finally:
        server.start()
    wait_delivered(server, session, sent, directory)
    wait_until(lambda: all(rows(db)[m][2] is not None for m in sent), PATIENCE_S, "verification")
    final = rows(db)
    assert all(final[m][:2] == ("handed_off", 0) for m in sent), final


def test_deleted_directory_holds_until_it_is_back(
    opencode_1_18: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """A session whose directory is gone gets nothing (opencode would 204 and run no
    turn); the message waits without spending attempts and goes out once it is back."""
    server = opencode_1_18
    directory = tmp_path / "project that goes away"
    directory.mkdir()
    session = server.create_session(str(directory), "deleted directory")
    db = tmp_path / "p.db"
    daemon = start_pigeond(daemons, db, server.url)
    directory.rmdir()
    msg_id = post(daemon, {"from": "ses_a", "to": session, "payload": "are you there?"})
    wait_until(lambda: rows(db)[msg_id][3] is not None, PATIENCE_S, "the hold")
    state, attempts, _, error = rows(db)[msg_id]
    assert (state, attempts) == ("queued", 0) and "does not exist" in str(error)
    assert batches_in_transcript(server, session) == []
    directory.mkdir()
    wait_delivered(server, session, [msg_id], str(directory))
    assert rows(db)[msg_id][:2] == ("handed_off", 0)
