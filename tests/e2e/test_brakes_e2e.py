"""The conversation brakes on the real opencode 1.18.33, through pigeond's plugin: two
sessions whose (fake) model answers every swarm message with a ``swarm_send`` back to its
sender (the echo model) message each other for ever when the brakes are off.  With the
default brakes the exchange stops at the hop limit, its next message held for a person,
who sees it in ``pigeon held`` and the TUI and releases it (the exchange goes on to the
next brake), or whose own prompt in one of the sessions starts the count over."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from pigeond.brakes.hops import hop_reason
from pigeond_tui.app import PigeonApp
from testkit.daemon_process import DaemonFactory, DaemonProcess, isolated_env
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S, holds_for, wait_until
from tests.e2e.agents import Agent, start_pigeond
from tests.tui_support import drive, highlight, settle, table_keys

PIGEON = Path(sys.executable).parent / "pigeon"
LIMIT = 12  # max_hops_per_thread's default
ECHO_DELAY_S = 0.05  # the fake model's time for one completion: about two a hop
EXCHANGE_S = 150.0  # the bound on one run of the exchange, to its stop or its target
VERIFY_INTERVAL_S = 0.5
QUIET_S = 4 * VERIFY_INTERVAL_S  # how long a stopped exchange is watched for a further send
BRAKES_OFF = (
    "--max-hops-per-thread", "0", "--max-pair-messages-per-minute", "0",
    "--max-repeats-per-pair", "0", "--thread-budget-tokens", "0", "--thread-budget-cost", "0",
)  # fmt: skip
FAST_VERIFY = ("--verify-interval-s", str(VERIFY_INTERVAL_S))


@dataclass(frozen=True, slots=True)
class Exchange:
    """Two echo sessions, the pigeond between them, and the thread of their exchange."""

    daemon: DaemonProcess
    a: Agent
    b: Agent
    thread: str
    db: Path


@pytest.fixture
def echo_pair(opencode_with_plugin: OpencodeServer, fake_llm: FakeLLM) -> Iterator[list[Agent]]:
    """Sessions A and B with the echo model; afterwards the model stops echoing and both
    sessions are aborted and idle, so the shared opencode is left quiet."""
    fake_llm.delay_s = ECHO_DELAY_S
    fake_llm.echo_swarm = True
    agents = [Agent(opencode_with_plugin, fake_llm, d, f"echo {d}") for d in ("dirA", "dirB")]
    yield agents
    fake_llm.echo_swarm = False
    for agent in agents:
        agent.server.abort(agent.id, agent.directory)
        agent.server.wait_idle(agent.id, agent.directory, timeout_s=PATIENCE_S)


def start_exchange(
    daemons: DaemonFactory, tmp_path: Path, port: int, agents: list[Agent], *options: str
) -> Exchange:
    """pigeond with ``options``, and A's first message to B (an agent's send: hop 1)."""
    a, b = agents
    daemon = start_pigeond(daemons, tmp_path, a.server, port, (*FAST_VERIFY, *options))
    status, answer = daemon.request_json(
        "POST", "/swarm/send", {"from": a.id, "to": b.id, "payload": "hello B, over to you"}
    )
    assert status == 202 and "held" not in answer, answer
    return Exchange(daemon, a, b, str(answer["thread"]), tmp_path / "p.db")


def thread_row(ex: Exchange) -> dict[str, Any]:
    status, listed = ex.daemon.request_json("GET", "/swarm/threads")
    assert status == 200, listed
    [row] = [t for t in listed["threads"] if t["thread"] == ex.thread]
    return dict(row)


def held(ex: Exchange) -> list[dict[str, Any]]:
    status, listed = ex.daemon.request_json("GET", f"/swarm/held?thread={ex.thread}")
    assert status == 200, listed
    return list(listed["held"])


def next_hold(ex: Exchange, before: set[str]) -> dict[str, Any]:
    """Wait for a held message other than ``before``'s (the exchange's next stop)."""
    found = wait_until(
        lambda: [h for h in held(ex) if h["msg_id"] not in before], EXCHANGE_S, "a brake hold"
    )
    [hold] = found
    return hold


def both_idle(ex: Exchange) -> None:
    for agent in (ex.a, ex.b):
        agent.server.wait_idle(agent.id, agent.directory, timeout_s=PATIENCE_S)


def stays_stopped(ex: Exchange) -> int:
    """Both sessions idle, and no message added to the thread for a few verify intervals;
    the thread's count of messages."""
    both_idle(ex)
    count = thread_row(ex)["messages"]
    holds_for(lambda: thread_row(ex)["messages"] == count, QUIET_S, "a stopped exchange")
    return int(count)


def pigeon(ex: Exchange, *argv: str) -> subprocess.CompletedProcess[str]:
    """The real ``pigeon`` command on the daemon's database."""
    return subprocess.run(
        [str(PIGEON), *argv, "--db", str(ex.db)], capture_output=True, text=True,
        timeout=PATIENCE_S, env=isolated_env(ex.db.parent / "home"),
    )  # fmt: skip


def last_send_output(ex: Exchange, sender: str) -> str:
    """What the sender's latest swarm_send told its model."""
    [agent] = [a for a in (ex.a, ex.b) if a.id == sender]
    sends = [p for p in agent.server.tool_parts(agent.id) if p.get("tool") == "swarm_send"]
    return str(sends[-1]["state"].get("output", ""))


def delivered(ex: Exchange, msg_id: str) -> bool:
    _, shown = ex.daemon.request_json("GET", f"/swarm/message/{msg_id}")
    return shown.get("receipt") in ("seen", "answered")


def test_without_brakes_the_echo_exchange_runs_until_it_is_stopped(
    daemons: DaemonFactory, echo_pair: list[Agent], tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """Every brake off: the two sessions exchange three times the default hop limit in
    one thread, nothing held, and are still going when the test stops pigeond."""
    ex = start_exchange(daemons, tmp_path, plugin_pigeond_port, echo_pair, *BRAKES_OFF)
    wait_until(lambda: thread_row(ex)["messages"] >= 3 * LIMIT, EXCHANGE_S, "36 messages")
    row = thread_row(ex)
    assert row["hops"] == row["messages"] and held(ex) == []
    going = row["messages"]
    wait_until(lambda: thread_row(ex)["messages"] > going, PATIENCE_S, "one more message")
    assert ex.daemon.stop() == 0 and "Traceback" not in ex.daemon.output()


def test_the_default_brakes_hold_the_exchange_at_the_hop_limit_for_a_person(
    daemons: DaemonFactory, echo_pair: list[Agent], tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """No brake option: the 13th message is held by the hop brake with its reason (its
    sender's swarm_send says so), and nothing more is sent; pigeon held and the TUI (its
    held view, its detail pane) show it; pigeon release delivers it and the exchange goes
    on, its hops counted from 0, until the next brake holds it: the repeat brake, as a
    hop reset leaves the pair's count of alike payloads as it was."""
    ex = start_exchange(daemons, tmp_path, plugin_pigeond_port, echo_pair)
    hold = next_hold(ex, set())
    assert (hold["brake"], hold["reason"]) == ("hops", hop_reason(ex.thread, LIMIT))
    assert stays_stopped(ex) == LIMIT + 1
    row = thread_row(ex)
    assert (row["hops"], row["held"]) == (LIMIT, 1)
    told = last_send_output(ex, hold["from"])
    assert told.startswith(f"held: {hold['reason']} ({hold['msg_id']} is stored"), told

    cli = pigeon(ex, "held", "--json")
    assert cli.returncode == 0, cli.stderr
    [listed] = json.loads(cli.stdout)
    assert (listed["msg_id"], listed["brake"], listed["thread"]) == (
        hold["msg_id"], "hops", ex.thread,
    )  # fmt: skip
    held_view, detail = tui_shows(ex.db, hold["msg_id"])
    [cells] = held_view
    assert cells[:5] == [hold["msg_id"], hold["from"], hold["to"], ex.thread, "hops"], cells
    assert re.search(r"hold_kind +brake\n", detail) and re.search(r"hold_brake +hops\n", detail)
    assert hop_reason(ex.thread, LIMIT) in detail

    cli = pigeon(ex, "release", hold["msg_id"])
    assert (cli.returncode, cli.stdout) == (0, f"{hold['msg_id']}: released (reset)\n")
    wait_until(lambda: delivered(ex, hold["msg_id"]), PATIENCE_S, "the released message")
    again = next_hold(ex, {hold["msg_id"]})
    assert again["brake"] == "repeat", again
    row = thread_row(ex)  # the sends after the released one, each a hop again
    assert row["hops"] == row["messages"] - (LIMIT + 1) - 1 < LIMIT, row


def tui_shows(db: Path, msg_id: str) -> tuple[list[list[str]], str]:
    """The TUI on the database: the rows of its held view (``h``), and the detail pane of
    the held message, highlighted in the main list's default (queued) tab."""
    rows: list[list[str]] = []
    detail: list[str] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        assert msg_id in table_keys(app, "#messages")
        await highlight(app, pilot, msg_id)
        await settle(app, pilot)
        detail.append(str(app.query_one("#detail", Static).render()))
        await pilot.press("h")
        await settle(app, pilot)
        table = app.screen.query_one("#held-table", DataTable)
        rows.extend([str(c) for c in table.get_row_at(i)] for i in range(table.row_count))

    drive(db, script)
    return rows, detail[0]


def test_a_persons_prompt_in_one_session_starts_the_hops_over(
    daemons: DaemonFactory, echo_pair: list[Agent], tmp_path: Path, plugin_pigeond_port: int
) -> None:
    """Held at the hop limit, a person tells A (a prompt of their own, not an envelope)
    to answer B's last message: that send goes, the thread's count starts from the
    prompt, and the exchange runs on from there (to the repeat brake, before the hop
    limit comes round again)."""
    ex = start_exchange(daemons, tmp_path, plugin_pigeond_port, echo_pair)
    first = next_hold(ex, set())
    assert first["brake"] == "hops"
    before = stays_stopped(ex)
    last_from_b = [e["msg_id"] for e, _ in ex.a.envelopes() if e["from"] == ex.b.id][-1]
    call = {"to": ex.b.id, "payload": "a person here: carry on", "reply_to": last_from_b}
    prompt = f"carry on, please: CALL swarm_send {json.dumps(call)}"
    assert ex.a.server.prompt_async(ex.a.id, ex.a.directory, prompt) == 204
    wait_until(lambda: thread_row(ex)["messages"] > before, PATIENCE_S, "the prompted send")
    [prompted_at] = [
        m["info"]["time"]["created"]
        for m in ex.a.server.messages(ex.a.id, ex.a.directory)
        if m["info"]["role"] == "user" and any(p.get("text") == prompt for p in m["parts"])
    ]
    row = thread_row(ex)
    assert row["reset_at"] == prompted_at and row["held"] == 1
    second = next_hold(ex, {first["msg_id"]})
    row = thread_row(ex)
    accepted_since = row["messages"] - before - 1  # the sends since the prompt, not held
    assert accepted_since >= 2 and row["hops"] == accepted_since, (row, second)
    assert row["reset_at"] == prompted_at and second["brake"] == "repeat", second
