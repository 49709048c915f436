"""Turn costs against the real opencode (1.18.33 and 1.15.4): after a hand-off's turn,
``GET /swarm/costs`` shows the tokens and cost opencode wrote on that turn's assistant
messages (the fake model reports 10 input tokens and one output token a word)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S, wait_until
from tests.e2e.test_delivery_e2e import OPENING_ID, post, start_pigeond
from tests.e2e.test_receipts_e2e import receipt


def turn_of(server: OpencodeServer, session: str, msg_id: str) -> list[dict[str, Any]]:
    """The assistant messages of the turn whose user message carried ``msg_id``'s envelope."""
    messages = server.messages(session)
    [home] = [
        m["info"]["id"]
        for m in messages
        if m["info"]["role"] == "user"
        for part in m["parts"]
        if part.get("type") == "text" and (hit := OPENING_ID.match(part.get("text", "")))
        if hit.group(1) == msg_id
    ]
    return [m["info"] for m in messages if m["info"].get("parentID") == home]


def costs(daemon: DaemonProcess, query: str) -> dict[str, Any]:
    status, body = daemon.request_json("GET", "/swarm/costs?" + query)
    assert status == 200, body
    assert isinstance(body, dict)
    return body


def answered(daemon: DaemonProcess, msg_id: str) -> bool:
    return bool(receipt(daemon, msg_id)["receipt"] == "answered")


def test_a_hand_offs_turn_is_recorded_with_the_transcripts_tokens(
    opencode_any: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """One message, one turn: the target's sums are that turn's tokens, as opencode wrote
    them, and they stay one turn however often the transcript is read again."""
    server, directory = opencode_any, opencode_any.dirs["dirA"]
    session = server.create_session(directory, "costs one")
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url)
    msg_id = post(daemon, {"from": "ses_a", "to": session, "payload": "what does it cost"})
    wait_until(lambda: answered(daemon, msg_id), PATIENCE_S, "the answer")
    steps = turn_of(server, session, msg_id)
    written = sum(
        s["tokens"]["input"] + s["tokens"]["output"] + s["tokens"]["reasoning"]
        + s["tokens"]["cache"]["read"] + s["tokens"]["cache"]["write"]
        for s in steps
    )  # fmt: skip
    assert written > 10  # the fake model's 10 input tokens, and its words
    [row] = costs(daemon, f"session={session}")["sessions"]
    assert (row["turns"], row["tokens"], row["input_tokens"]) == (1, written, 10 * len(steps))
    assert row["cost"] == sum(s["cost"] for s in steps) and row["cost_unknown_turns"] == 0
    second = post(daemon, {"from": "ses_a", "to": session, "payload": "and again"})
    wait_until(lambda: answered(daemon, second), PATIENCE_S, "the second answer")
    [row] = costs(daemon, f"session={session}")["sessions"]
    assert row["turns"] == 2


def send(daemon: DaemonProcess, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = daemon.request_json("POST", "/swarm/send", body)
    assert status == 202, answer
    assert isinstance(answer, dict)
    return answer


def test_a_thread_over_its_token_budget_holds_its_next_message(
    opencode_1_18: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """thread_budget_tokens=10: the first message's turn (recorded from the real transcript)
    reaches it, so the thread's next message is held with the budget's reason; a release
    with reset delivers it and its turn is recorded."""
    server, directory = opencode_1_18, opencode_1_18.dirs["dirB"]
    session = server.create_session(directory, "costs budget")
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url, "--thread-budget-tokens", "10")
    thread = "thr_budget_e2e"
    first = send(daemon, {"from": "ses_a", "to": session, "thread": thread,
                          "payload": "what does it cost"})  # fmt: skip
    assert "held" not in first and first["thread"] == thread
    wait_until(lambda: answered(daemon, first["msg_id"]), PATIENCE_S, "the first answer")
    [used] = costs(daemon, f"thread={thread}")["threads"]
    assert used["turns"] == 1 and used["tokens"] >= 10
    second = send(daemon, {"from": "ses_a", "to": session, "thread": thread, "payload": "more"})
    assert second["held"] == {
        "brake": "budget",
        "reason": f"thread {thread} used {used['tokens']:,} tokens, over its budget of 10;"
        " a person must release it",
    }
    status, held = daemon.request_json("GET", f"/swarm/held?thread={thread}")
    assert status == 200 and [h["msg_id"] for h in held["held"]] == [second["msg_id"]]
    status, _ = daemon.request_json(
        "POST", f"/swarm/held/{second['msg_id']}/release", {"mode": "reset"}
    )
    assert status == 200
    wait_until(lambda: answered(daemon, second["msg_id"]), PATIENCE_S, "the released answer")
    assert costs(daemon, f"thread={thread}")["threads"][0]["turns"] == 2
