"""The hop brake's person-prompt reset against the real opencode 1.18.33: the swarm
envelopes pigeond hands off are user messages too, but only a person's own prompt (a
user message posted to the session directly) starts a thread's hops over."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S, wait_until
from tests.e2e.test_delivery_e2e import start_pigeond

LIMIT = 2


def send(daemon: DaemonProcess, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = daemon.request_json("POST", "/swarm/send", body)
    assert status == 202, answer
    return dict(answer)


def seen(daemon: DaemonProcess, msg_id: str) -> bool:
    """Whether the message's envelope is in its target's transcript (its receipt says seen)."""
    _, shown = daemon.request_json("GET", f"/swarm/message/{msg_id}")
    return shown.get("receipt") in ("seen", "answered")


def thread_row(daemon: DaemonProcess, thread: str) -> dict[str, Any]:
    _, listed = daemon.request_json("GET", "/swarm/threads")
    [row] = [t for t in listed["threads"] if t["thread"] == thread]
    return dict(row)


def test_only_a_persons_own_prompt_resets_the_hops(
    opencode_1_18: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """Envelopes in both transcripts leave the thread held; a person's prompt in one
    session lets the next send go, and the thread's count starts from that prompt."""
    server = opencode_1_18
    a_dir, b_dir = server.dirs["dirA"], server.dirs["dirB"]
    a = server.create_session(a_dir, "person prompts A")
    b = server.create_session(b_dir, "person prompts B")
    daemon = start_pigeond(
        daemons, tmp_path / "p.db", server.url, "--max-hops-per-thread", str(LIMIT)
    )
    first = send(daemon, {"from": a, "to": b, "payload": "ping"})
    second = send(daemon, {"from": b, "to": a, "payload": "pong", "reply_to": first["msg_id"]})
    sent = (str(first["msg_id"]), str(second["msg_id"]))
    wait_until(lambda: all(seen(daemon, m) for m in sent), PATIENCE_S, "both envelopes seen")
    server.wait_idle(a, a_dir, timeout_s=PATIENCE_S)
    server.wait_idle(b, b_dir, timeout_s=PATIENCE_S)

    third = send(daemon, {"from": a, "to": b, "payload": "ping", "reply_to": second["msg_id"]})
    assert third["held"]["brake"] == "hops", third  # envelopes are no person's prompt
    thread = thread_row(daemon, first["thread"])
    assert (thread["hops"], thread["held"]) == (LIMIT, 1)

    assert server.prompt_async(a, a_dir, "carry on, both of you") == 204
    server.wait_idle(a, a_dir, timeout_s=PATIENCE_S)
    [prompted_at] = [
        m["info"]["time"]["created"]
        for m in server.messages(a, a_dir)
        if m["info"]["role"] == "user"
        and any(p.get("text") == "carry on, both of you" for p in m["parts"])
    ]
    fourth = send(daemon, {"from": a, "to": b, "payload": "ping", "reply_to": second["msg_id"]})
    assert "held" not in fourth, fourth
    thread = thread_row(daemon, first["thread"])
    assert (thread["hops"], thread["reset_at"]) == (1, prompted_at)
