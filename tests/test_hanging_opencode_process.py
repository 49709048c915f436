"""A real daemon against an opencode that accepts connections and never answers (issue 27,
measurements 5 and 7): sends are still answered, and what is open at opencode is bounded."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.polling import PATIENCE_S, holds_for, wait_until
from tests.hanging_server import HangingServer, json_answer

SENDS = 30
CAP = 4


def send_to(daemon: DaemonProcess, target: str) -> tuple[int, Any]:
    body = json.dumps({"from": "ses_sender", "to": target, "payload": "hi"}).encode()
    headers = daemon.auth_headers | {"content-type": "application/json"}
    request = urllib.request.Request(daemon.base_url + "/swarm/send", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=PATIENCE_S) as answer:
        return answer.status, json.loads(answer.read())


def test_sends_to_unknown_targets_keep_at_most_the_cap_of_lookups_open(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    """30 sends together to 30 sessions an unanswering opencode is asked about: all get
    202 (target_checked false), and no more than max_session_lookups requests for a session
    are open at opencode, then or while the hand-offs wait."""
    with HangingServer() as opencode:
        daemon = daemons.start(
            tmp_path / "p.db", opencode_url=opencode.url,
            extra_args=["--max-session-lookups", str(CAP)],
        )  # fmt: skip
        with ThreadPoolExecutor(SENDS) as pool:
            answers = list(pool.map(lambda n: send_to(daemon, f"ses_new{n}"), range(SENDS)))
        assert {(status, body["target_checked"]) for status, body in answers} == {(202, False)}
        wait_until(lambda: opencode.open_requests("GET /session/ses_new"), PATIENCE_S,
                   "a session lookup at opencode")  # fmt: skip
        holds_for(
            lambda: len(opencode.open_requests("GET /session/ses_new")) <= CAP,
            2.0, f"at most {CAP} session lookups open at opencode",
        )  # fmt: skip


def test_a_hanging_transcript_read_shows_opencode_degraded_on_health(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    """opencode answers every call but the transcript reads (GET /session/<id>/message),
    which hang: /health comes to say opencode degraded, naming why, and the message waits
    queued with no attempt spent."""
    directory = tmp_path / "project"
    directory.mkdir()

    def answer(line: str) -> bytes | None:
        method, path, _ = line.split(" ")
        if "/message" in path or path.startswith("/global/event"):
            return None  # held: never answered
        if method == "POST":
            return json_answer(204, None)
        if path.startswith("/session/ses_"):
            return json_answer(200, {"id": path.split("/")[2], "directory": str(directory)})
        return json_answer(200, [] if path.startswith("/agent") else {})

    with HangingServer(answer) as opencode:
        daemon = daemons.start(
            tmp_path / "p.db", opencode_url=opencode.url, extra_args=["--handoff-timeout-s", "1"]
        )
        status, body = send_to(daemon, "ses_t")
        assert (status, body["target_checked"]) == (202, True)
        health = wait_until(
            lambda: (h := daemon.request_json("GET", "/health")[1])["opencode"] == "degraded" and h,
            PATIENCE_S, "opencode degraded on /health",
        )  # fmt: skip
        assert health["opencode_problem"].startswith("transcript reads time out (")
        [stored] = daemon.stored_messages()
        assert (stored.state, stored.attempts) == ("queued", 0)
