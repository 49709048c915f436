"""Two hosts on one PostgreSQL, end to end: on each, a real ``opencode serve`` 1.18.33 with
pigeond's plugin and a pigeond beside it (``--daemon-name host-a|host-b``, each with a
home of its own: its state folder holds its instance lock and its token), both daemons on
one database; one fake LLM serves both opencodes (it tells sessions apart by their ids).

A message from a session on host A to a session on host B reaches B's transcript once
and is verified; senders on both hosts hammering one target on B get every message there
once, one turn at a time; ``kill -9`` of B's daemon mid-stream, and a PostgreSQL restart
mid-stream, lose nothing that got a 202 and deliver nothing twice.

The hosts are loopback ports, not network namespaces: the harness (``OpencodeServer``,
``DaemonProcess``, the fake LLM) binds and calls 127.0.0.1 only, and namespaces would need
veth links and routes set up as root for each opencode to reach the fake LLM.  What makes
a host in pigeond is not its address but its daemon name, its state folder and the
opencode it delivers to, and those are each host's own here.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pigeond.storage import SwarmRepository
from pigeond.storage.postgres import open_postgres
from testkit.daemon_process import DaemonFactory, DaemonProcess, client_token_file
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.pg_cluster import PgCluster
from testkit.polling import PATIENCE_S
from tests.e2e.agents import TOOL_TIMEOUT_S, TURN_ARGS, Agent, wait_until
from tests.e2e.test_delivery_e2e import batches_in_transcript

ROUNDS = 4
OUTAGE_S = 1.5  # well within the tool's retries (PLUGIN_SEND_RETRY_S)
DELIVERY_TIMEOUT_S = PATIENCE_S
HOST_ARGS = (*TURN_ARGS, "--verify-interval-s", "0.3")


@dataclass
class Host:
    """One machine: its opencode (with the plugin calling pigeond on ``port``) and the
    pigeond beside it, started by its own factory (so in a home of its own)."""

    name: str
    server: OpencodeServer
    port: int
    factory: DaemonFactory
    db: str
    daemon: DaemonProcess | None = None

    def start(self) -> DaemonProcess:
        """(Re)start this host's pigeond on its port; the running one."""
        self.daemon = self.factory.start(
            self.db, opencode_url=self.server.url, listen=f"tcp:{self.port}:interface=127.0.0.1",
            extra_args=(*HOST_ARGS, "--daemon-name", self.name),
        )  # fmt: skip
        return self.daemon

    @property
    def pigeond(self) -> DaemonProcess:
        """This host's pigeond, which must be running."""
        assert self.daemon is not None and self.daemon.running
        return self.daemon


@pytest.fixture
def hosts(
    opencode_with_plugin: OpencodeServer,
    opencode_with_plugin_b: OpencodeServer,
    plugin_pigeond_port: int,
    plugin_pigeond_port_b: int,
    plugin_token_link: Path,
    plugin_token_link_b: Path,
    fake_llm: FakeLLM,
    pg_url: str,
    tmp_path: Path,
) -> Iterator[tuple[Host, Host]]:
    """Host A and host B, each with its pigeond running; the plugin of each opencode reads
    its own daemon's token."""
    places = (
        ("host-a", opencode_with_plugin, plugin_pigeond_port, plugin_token_link),
        ("host-b", opencode_with_plugin_b, plugin_pigeond_port_b, plugin_token_link_b),
    )
    pair: list[Host] = []
    for name, server, port, link in places:
        factory = DaemonFactory(tmp_path / name)
        link.unlink(missing_ok=True)  # the daemon makes its token at its first start
        link.symlink_to(client_token_file(tmp_path / name / "home"))
        pair.append(Host(name, server, port, factory, pg_url))
    try:
        for host in pair:
            host.start()
        yield pair[0], pair[1]
    finally:
        for host in pair:
            host.factory.close()


def tool_msg_id(session: str, call_id: str) -> str:
    """The msg_id the plugin's swarm_send gives a call (the same for each of its retries)."""
    digest = hashlib.sha256(f"{session}\n{call_id}".encode()).hexdigest()
    return "msg_tool_" + digest[:32]


Calls = list[tuple[Agent, str]]


def start_sends(senders: Sequence[Agent], target: Agent, label: str) -> Calls:
    """Each sender's model starts one swarm_send to ``target``, all at once."""
    calls = []
    for n, sender in enumerate(senders):
        call_id = "call_" + uuid.uuid4().hex[:20]
        args = {"to": target.id, "payload": f"{label} from sender {n}"}
        sender.start_call("swarm_send", args, call_id)
        calls.append((sender, call_id))
    return calls


def finish_sends(calls: Calls) -> dict[str, bool]:
    """Each call's msg_id, and whether the tool said it was sent (pigeond answered 202)."""
    outcome = {}
    for sender, call_id in calls:
        state = sender.finish_call(call_id)["state"]
        msg_id = tool_msg_id(sender.id, call_id)
        if state["status"] == "completed":
            assert str(state["output"]).startswith(f"sent {msg_id} to "), state
        else:
            assert "the message was NOT sent" in str(state.get("error")), state
        outcome[msg_id] = state["status"] == "completed"
    return outcome


def send_rounds(senders: Sequence[Agent], target: Agent, label: str, rounds: int) -> list[str]:
    """``rounds`` times, each sender sends once, all at once; the msg_ids, every one sent."""
    sent: list[str] = []
    for n in range(rounds):
        outcome = finish_sends(start_sends(senders, target, f"{label} {n}"))
        assert all(outcome.values()), outcome
        sent += outcome
    return sent


def arrivals(target: Agent) -> Counter[str]:
    """How many times each msg_id's envelope is in the target's transcript."""
    return Counter(attributes["msg_id"] for attributes, _ in target.envelopes())


def receipt(daemon: DaemonProcess, msg_id: str) -> dict[str, Any]:
    status, body = daemon.request_json("GET", f"/swarm/message/{msg_id}")
    assert status == 200, body
    assert isinstance(body, dict)
    return body


def verified(body: dict[str, Any]) -> bool:
    """Seen in the target's transcript by the daemon that delivered it (or answered)."""
    return body["receipt"] in ("seen", "answered") and body["verified_at"] is not None


def wait_verified(daemon: DaemonProcess, msg_ids: Sequence[str]) -> None:
    """Every message is verified (so none is queued again); read through ``daemon``."""
    wait_until(
        lambda: all(verified(receipt(daemon, m)) for m in msg_ids),
        f"{len(msg_ids)} messages verified",
        DELIVERY_TIMEOUT_S,
    )


def settled_arrivals(target: Agent, daemon: DaemonProcess, msg_ids: Sequence[str]) -> Counter[str]:
    """Once every message is verified and the target idle: each msg_id's arrivals."""
    wait_verified(daemon, msg_ids)
    target.server.wait_idle(target.id, target.directory, timeout_s=TOOL_TIMEOUT_S)
    return arrivals(target)


def route_of(pg_url: str, session: str) -> str | None:
    """The daemon the shared database routes ``session`` to."""
    repo = SwarmRepository(open_postgres(pg_url))
    try:
        route = repo.route_of(session)
        return None if route is None else route.daemon
    finally:
        repo.close()


def overlapping_turns(llm: FakeLLM, session: str) -> list[tuple[float, float]]:
    """Pairs of the session's model calls that were in flight at once (their starts)."""
    calls = sorted(llm.completions("main", session), key=lambda c: c.start)
    return [
        (a.start, b.start) for i, a in enumerate(calls) for b in calls[i + 1 :] if a.overlaps(b)
    ]


def test_a_message_from_host_a_reaches_host_b_once_and_is_verified(
    hosts: tuple[Host, Host], fake_llm: FakeLLM, pg_url: str
) -> None:
    """A's agent sends to B's session: B's transcript has the envelope once, both daemons
    show it seen, and the database routes each session to its own host."""
    a, b = hosts
    sender = Agent(a.server, fake_llm, "dirA", "sender on A")
    target = Agent(b.server, fake_llm, "dirA", "target on B")
    part = sender.call("swarm_send", {"to": target.id, "payload": "across the hosts"})
    assert part["state"]["status"] == "completed", part["state"]
    msg_id = str(part["state"]["output"]).split()[1]

    counts = settled_arrivals(target, b.pigeond, [msg_id])
    assert counts == {msg_id: 1}
    [(attributes, text)] = target.envelopes()
    assert (attributes["from"], attributes["to"]) == (sender.id, target.id)
    assert text.count("across the hosts") == 1
    for daemon in (a.pigeond, b.pigeond):
        body = receipt(daemon, msg_id)
        assert verified(body) and body["state"] == "handed_off", body
    assert (route_of(pg_url, target.id), route_of(pg_url, sender.id)) == ("host-b", "host-a")


def test_senders_on_both_hosts_hammering_one_target_get_one_turn_at_a_time(
    hosts: tuple[Host, Host], fake_llm: FakeLLM
) -> None:
    """Two senders on A and one on B send to one session on B at once, four times each:
    every message arrives once, and no two of the target's model calls overlap, nor does a
    prompt join a running turn (one model call per prompt)."""
    a, b = hosts
    target = Agent(b.server, fake_llm, "dirA", "hammered on B")
    senders = [
        Agent(a.server, fake_llm, "dirA", "first sender on A"),
        Agent(a.server, fake_llm, "dirB", "second sender on A"),
        Agent(b.server, fake_llm, "dirB", "sender on B"),
    ]
    sent = send_rounds(senders, target, "hammer", ROUNDS)

    counts = settled_arrivals(target, b.pigeond, sent)
    assert counts == dict.fromkeys(sent, 1)
    assert overlapping_turns(fake_llm, target.id) == []
    assert fake_llm.max_concurrent("main", target.id) == 1
    prompts = batches_in_transcript(b.server, target.id)
    assert len(fake_llm.completions("main", target.id)) == len(prompts) <= len(sent)


def test_kill_9_of_host_b_s_daemon_mid_stream_loses_nothing(
    hosts: tuple[Host, Host], fake_llm: FakeLLM
) -> None:
    """Senders on A keep sending to B's session while B's daemon is killed (as the first
    envelopes arrive) and started again: what A accepted meanwhile waits for B, and every
    202'd message arrives once."""
    a, b = hosts
    target = Agent(b.server, fake_llm, "dirB", "target on B")
    senders = [
        Agent(a.server, fake_llm, "dirA", "first sender on A"),
        Agent(a.server, fake_llm, "dirB", "second sender on A"),
    ]
    calls = start_sends(senders, target, "before the kill")
    wait_until(target.envelopes, "the stream under way", DELIVERY_TIMEOUT_S)
    b.pigeond.kill()
    outcome = finish_sends(calls)
    assert all(outcome.values()), outcome
    sent = list(outcome)
    while_down = send_rounds(senders, target, "while B is down", 2)
    assert not set(while_down) & set(arrivals(target)), "delivered with B's daemon down"

    b.start()
    sent += while_down + send_rounds(senders, target, "after the restart", 1)
    counts = settled_arrivals(target, a.pigeond, sent)
    assert counts == dict.fromkeys(sent, 1)


def test_a_postgresql_restart_mid_stream_loses_nothing_that_got_a_202(
    hosts: tuple[Host, Host], fake_llm: FakeLLM, pg_cluster: PgCluster
) -> None:
    """PostgreSQL stops while messages are handed off and sent, and starts again: meanwhile
    both daemons answer sends with 503 (storing nothing) and the tool retries with the same
    msg_id; every send that got a 202 arrives once, and nothing arrives twice."""
    a, b = hosts
    target = Agent(b.server, fake_llm, "dirC", "target on B")
    senders = [
        Agent(a.server, fake_llm, "dirA", "sender on A"),
        Agent(b.server, fake_llm, "dirA", "sender on B"),
    ]
    sent = send_rounds(senders, target, "before the outage", 1)  # delivered meanwhile
    calls = start_sends(senders, target, "across the outage")  # their tools run meanwhile
    pg_cluster.pg_ctl("stop", "-m", "fast")
    try:
        probes = {
            host.name: host.pigeond.request_json(
                "POST", "/swarm/send",
                body={"msg_id": f"msg_probe_{host.name.replace('-', '_')}",
                      "from": senders[0].id, "to": target.id, "payload": "during the outage"},
            )[0]
            for host in (a, b)
        }  # fmt: skip
        time.sleep(OUTAGE_S)  # the outage's length
    finally:
        pg_cluster.pg_ctl("start")
    assert probes == {"host-a": 503, "host-b": 503}
    outcome = finish_sends(calls)
    sent += [m for m, ok in outcome.items() if ok]
    sent += send_rounds(senders, target, "after the outage", 2)

    counts = settled_arrivals(target, a.pigeond, sent)
    assert {m: counts[m] for m in sent} == dict.fromkeys(sent, 1)
    assert max(counts.values()) == 1, counts
    assert set(counts) <= set(outcome) | set(sent), "only what was sent arrives"
    for probe in ("msg_probe_host_a", "msg_probe_host_b"):
        assert a.pigeond.request_json("GET", f"/swarm/message/{probe}")[0] == 404
