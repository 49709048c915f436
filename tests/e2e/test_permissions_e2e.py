"""Permission requests surfaced, on the real opencode: a session that must ask before
``bash`` is woken by a swarm message whose (fake) model calls bash.  The request shows in
``pigeon permissions`` and the TUI; ``pigeon permission answer ID once`` (or the TUI's
``o``) lets the turn finish and the message reach ``answered``; a request answered at
opencode itself leaves the list; an open request survives a restart of pigeond."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable

from pigeond.cli.daemon_call import answer_through_daemon
from pigeond_tui.app import PigeonApp
from testkit.daemon_process import DaemonFactory, DaemonProcess, isolated_env
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S, wait_until
from tests.e2e.agents import Agent
from tests.e2e.test_delivery_e2e import post, start_pigeond
from tests.tui_support import drive, settle

PIGEON = Path(sys.executable).parent / "pigeon"
ASK_BASH = [{"permission": "bash", "pattern": "*", "action": "ask"}]
SENDER = "ses_asker"


def asking_session(server: OpencodeServer, directory: str, title: str) -> str:
    """A session whose own rules make bash ask (as ``"permission": {"bash": "ask"}`` does)."""
    response = server.request(
        "POST", "/session", {"title": title, "permission": ASK_BASH}, directory=directory
    )
    assert response.status == 200, response.body
    return str(response.json()["id"])


def pigeon(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PIGEON), *argv], capture_output=True, text=True, timeout=PATIENCE_S,
        env=isolated_env(tmp_path / "home"),
    )  # fmt: skip


def listed(tmp_path: Path) -> list[dict[str, Any]]:
    """``pigeon permissions --json``."""
    cli = pigeon(tmp_path, "permissions", "--db", str(tmp_path / "p.db"), "--json")
    assert cli.returncode == 0, cli.stderr
    requests: list[dict[str, Any]] = json.loads(cli.stdout)
    return requests


def message(daemon: DaemonProcess, msg_id: str) -> dict[str, Any]:
    status, body = daemon.request_json("GET", f"/swarm/message/{msg_id}")
    assert status == 200 and isinstance(body, dict), body
    return body


def send_bash(daemon: DaemonProcess, session: str, command: str) -> str:
    """A swarm message whose turn calls bash with ``command``."""
    payload = f'CALL bash {{"command": "{command}", "description": "run it"}}'
    return post(daemon, {"from": SENDER, "to": session, "payload": payload})


def wait_for_request(tmp_path: Path, session: str) -> dict[str, Any]:
    found = wait_until(
        lambda: [r for r in listed(tmp_path) if r["session"] == session],
        PATIENCE_S, "the permission request in pigeon permissions",
    )  # fmt: skip
    request: dict[str, Any] = found[0]
    return request


def test_an_operator_answers_once_and_the_message_is_answered(
    opencode_any: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """bash asked during a hand-off is listed with the message; answered once from the
    CLI, the command runs, the turn ends with a reply and the message is answered."""
    server, directory = opencode_any, opencode_any.dirs["dirA"]
    session = asking_session(server, directory, "permission once")
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url)
    msg_id = send_bash(daemon, session, "echo perm-once-ok")
    request = wait_for_request(tmp_path, session)
    assert (request["msg_id"], request["from"], request["permission"]) == (msg_id, SENDER, "bash")
    assert request["patterns"] == ["echo perm-once-ok"] and request["id"].startswith("per")
    text = pigeon(tmp_path, "permissions", "--db", str(tmp_path / "p.db")).stdout
    assert f"{session} waits for permission: bash `echo perm-once-ok`, while handling" in text
    assert message(daemon, msg_id)["waiting_on_permission"]["id"] == request["id"]
    cli = pigeon(tmp_path, "permission", "answer", request["id"], "once", "--url", daemon.base_url)
    assert (cli.returncode, cli.stdout) == (0, f"{request['id']}: answered once\n"), cli.stderr
    wait_until(lambda: message(daemon, msg_id)["receipt"] == "answered", PATIENCE_S, "answered")
    assert listed(tmp_path) == [] and message(daemon, msg_id)["waiting_on_permission"] is None
    [tool] = [p for p in server.tool_parts(session) if p.get("tool") == "bash"]
    assert tool["state"]["status"] == "completed" and "perm-once-ok" in tool["state"]["output"]


def test_a_request_answered_at_opencode_leaves_the_list(
    opencode_any: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """Answered at the target's own terminal (opencode's own route): gone from the list."""
    server, directory = opencode_any, opencode_any.dirs["dirB"]
    session = asking_session(server, directory, "permission elsewhere")
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url)
    msg_id = send_bash(daemon, session, "echo perm-elsewhere")
    request = wait_for_request(tmp_path, session)
    answered = server.request(
        "POST", f"/permission/{request['id']}/reply", {"reply": "reject"}, directory=directory
    )
    assert answered.status == 200, answered.body
    wait_until(lambda: listed(tmp_path) == [], PATIENCE_S, "the request gone from the list")
    cli = pigeon(tmp_path, "permission", "answer", request["id"], "once", "--url", daemon.base_url)
    assert cli.returncode == 1 and "no open permission request" in cli.stderr
    assert message(daemon, msg_id)["waiting_on_permission"] is None


def test_an_open_request_survives_a_restart_and_can_be_answered_after_it(
    opencode_1_18: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """pigeond restarted while the session waits: the request is still listed (opencode
    still has it), and answering it then lets the message reach answered."""
    server, directory = opencode_1_18, opencode_1_18.dirs["dirC"]
    session = asking_session(server, directory, "permission restart")
    first = start_pigeond(daemons, tmp_path / "p.db", server.url)
    msg_id = send_bash(first, session, "echo perm-restart")
    request = wait_for_request(tmp_path, session)
    assert first.stop() == 0
    second = start_pigeond(daemons, tmp_path / "p.db", server.url)
    wait_until(
        lambda: "permission requests re-checked: 1 of 1 still open" in second.output(),
        PATIENCE_S, "the start's re-check",
    )  # fmt: skip
    assert [r["id"] for r in listed(tmp_path)] == [request["id"]]
    cli = pigeon(tmp_path, "permission", "answer", request["id"], "once", "--url", second.base_url)
    assert cli.returncode == 0, cli.stderr
    wait_until(lambda: message(second, msg_id)["receipt"] == "answered", PATIENCE_S, "answered")
    assert listed(tmp_path) == []


def test_the_tui_shows_the_request_and_answers_it_through_the_daemon(
    opencode_1_18: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """The TUI's waiting view lists the request; its o key answers once through the daemon,
    and the message is answered."""
    server, directory = opencode_1_18, opencode_1_18.dirs["dirD"]
    session = asking_session(server, directory, "permission tui")
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url)
    msg_id = send_bash(daemon, session, "echo perm-tui")
    request = wait_for_request(tmp_path, session)
    shown: list[list[str]] = []

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await pilot.press("w")
        await settle(app, pilot)
        table = app.screen.query_one("#permissions-table", DataTable)
        shown.extend([str(c) for c in table.get_row_at(i)] for i in range(table.row_count))
        await pilot.press("o")
        await settle(app, pilot)

    answer = functools.partial(answer_through_daemon, daemon.base_url, daemon.token)
    app = drive(tmp_path / "p.db", script, answer_permission=answer)
    assert [row[:5] for row in shown] == [
        [request["id"], session, "bash `echo perm-tui`", msg_id, SENDER]
    ]
    assert f"{request['id']}: answered once" in app.reports
    wait_until(lambda: message(daemon, msg_id)["receipt"] == "answered", PATIENCE_S, "answered")


def test_the_sender_s_swarm_status_says_its_message_waits_on_a_permission(
    opencode_with_plugin: OpencodeServer, fake_llm: FakeLLM, daemon: DaemonProcess,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Through pigeond's plugin: A's swarm_send wakes B, whose turn asks for bash; A's
    swarm_status says the message waits on a permission in B, naming the request."""
    server = opencode_with_plugin
    sender = Agent(server, fake_llm, "dirA", "perm sender")
    target = asking_session(server, server.dirs["dirB"], "perm target")
    payload = 'CALL bash {"command": "echo perm-status", "description": "run it"}'
    sent = sender.call("swarm_send", {"to": target, "payload": payload})
    assert sent["state"]["status"] == "completed", sent["state"]
    msg_id = str(sent["state"]["output"].split()[1])
    request = wait_for_request(tmp_path, target)
    status = sender.call("swarm_status", {"msg_id": msg_id})
    assert f"waiting on a permission in {target}: bash `echo perm-status`" in str(
        status["state"]["output"]
    )
    assert f"(request {request['id']}," in str(status["state"]["output"])
    # leave the shared opencode with no turn waiting
    rejected = server.request(
        "POST", f"/permission/{request['id']}/reply", {"reply": "reject"},
        directory=server.dirs["dirB"],
    )  # fmt: skip
    assert rejected.status == 200, rejected.body
