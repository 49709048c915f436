"""The receipt chain against the real opencode 1.18.33: accepted → handed off → seen →
answered, for one message and for a batch of three, with the fake model writing replies."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from testkit.daemon_process import DaemonFactory, DaemonProcess, isolated_env
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S, wait_until
from tests.e2e.test_delivery_e2e import (
    OPENING_ID,
    batches_in_transcript,
    post,
    start_pigeond,
)
from tests.test_integration_delivery import PIGEON_SEND


def receipt(daemon: DaemonProcess, msg_id: str) -> dict[str, Any]:
    status, body = daemon.request_json("GET", f"/swarm/message/{msg_id}")
    assert status == 200, body
    assert isinstance(body, dict)
    return body


def reply_to(server: OpencodeServer, session: str, msg_id: str) -> dict[str, Any]:
    """The transcript's assistant message of the turn whose user message carried ``msg_id``:
    the last one naming it as parent."""
    messages = server.messages(session)
    [home] = [
        m["info"]["id"]
        for m in messages
        if m["info"]["role"] == "user"
        for part in m["parts"]
        if part.get("type") == "text" and (hit := OPENING_ID.match(part.get("text", "")))
        if hit.group(1) == msg_id
    ]
    replies = [m for m in messages if m["info"].get("parentID") == home]
    assert replies, f"no assistant message answers {home}"
    return replies[-1]


def test_one_message_is_answered_and_pigeon_send_waits_for_it(
    opencode_1_18: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """pigeon-send --wait --until answered exits 0; the receipt names the model's reply."""
    server, directory = opencode_1_18, opencode_1_18.dirs["dirA"]
    session = server.create_session(directory, "receipt one")
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url)
    cli = subprocess.run(
        [str(PIGEON_SEND), "--url", daemon.base_url, "--from", "ses_a", "--wait",
         "--until", "answered", "--timeout", str(int(PATIENCE_S)), session, "please answer"],
        capture_output=True, text=True, timeout=2 * PATIENCE_S, env=isolated_env(tmp_path / "home"),
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    msg_id = cli.stdout.strip()
    body = receipt(daemon, msg_id)
    reply = reply_to(server, session, msg_id)
    assert (body["receipt"], body["answer_message_id"]) == ("answered", reply["info"]["id"])
    assert body["handed_off_at"] <= body["verified_at"] <= body["answered_at"]
    assert reply["info"]["finish"] == "stop" and "completed" in reply["info"]["time"]


def test_a_batch_of_three_is_answered_by_the_turn_that_consumed_it(
    opencode_1_18: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """Three messages that waited out a person's turn go in one prompt; its one reply
    answers all three."""
    server, directory = opencode_1_18, opencode_1_18.dirs["dirB"]
    session = server.create_session(directory, "receipt batch")
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url)
    with fake_llm.turns_held():
        assert server.prompt_async(session, directory, "the person's own prompt") == 204
        fake_llm.wait_for(lambda llm: llm.in_flight("main") > 0, PATIENCE_S, "the person's turn")
        sent = [
            post(daemon, {"from": "ses_b", "to": session, "payload": f"part {n}"}) for n in range(3)
        ]

    def all_answered() -> bool:
        return all(receipt(daemon, m)["answered_at"] is not None for m in sent)

    wait_until(all_answered, PATIENCE_S, "three answers")
    assert batches_in_transcript(server, session) == [sent]
    bodies = [receipt(daemon, m) for m in sent]
    assert {b["receipt"] for b in bodies} == {"answered"}
    assert {b["answer_message_id"] for b in bodies} == {
        reply_to(server, session, sent[0])["info"]["id"]
    }
