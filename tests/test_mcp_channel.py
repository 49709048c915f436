"""pigeon-mcp's channel over real stdio: declared only with --channel, and each batch
``POST /swarm/agent/wait`` hands off is pushed as one ``notifications/claude/channel``.

pigeond's side of the route is stood in for by a stdlib server that answers the first
wait with a batch and every later one with nothing (the daemon's own route has its tests).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import pytest

from testkit.daemon_process import isolated_env
from testkit.polling import PATIENCE_S

pytestmark = pytest.mark.slow
SESSION = "0b6f1d2e-3c4a-4b5c-8d6e-7f8091a2b3c4"
PIGEON_MCP = str(Path(sys.executable).parent / "pigeon-mcp")
BATCH = '<swarm_message v="1" kind="chat" from="ses_A" to="x" msg_id="msg_1" priority="normal">\nhi\n</swarm_message>'  # noqa: E501


class WaitStandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bodies: list[dict[str, Any]] = []


class _Handler(BaseHTTPRequestHandler):
    server: WaitStandIn

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.bodies.append({"path": self.path, **body})
        first = len(self.server.bodies) == 1
        answer: dict[str, Any] = (
            {"text": BATCH, "msg_ids": ["msg_1"]} if first else {"text": None, "msg_ids": []}
        )
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def stand_in() -> Iterator[WaitStandIn]:
    server = WaitStandIn()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def start(tmp_path: Path, url: str, *args: str) -> subprocess.Popen[str]:
    env = isolated_env(tmp_path / "home", {"PIGEOND_URL": url, "CLAUDE_CODE_SESSION_ID": SESSION})
    return subprocess.Popen(
        [PIGEON_MCP, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def send(proc: subprocess.Popen[str], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    proc.stdin.flush()


def read_until(stream: IO[str], wanted: Any) -> dict[str, Any]:
    """Lines from the server until one ``wanted`` accepts (bounded by a timer)."""
    found: list[dict[str, Any]] = []

    def reader() -> None:
        for line in stream:
            message = json.loads(line)
            if wanted(message):
                found.append(message)
                return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(PATIENCE_S)
    assert found, "the server did not send it"
    return found[0]


def handshake(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    send(proc, {"id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}})  # fmt: skip
    result = read_until(proc.stdout, lambda m: m.get("id") == 1)["result"]
    send(proc, {"method": "notifications/initialized"})
    send(proc, {"id": 2, "method": "tools/list"})
    return dict(result)


def test_with_channel_a_batch_is_pushed_as_one_channel_notification(
    tmp_path: Path, stand_in: WaitStandIn
) -> None:
    """--channel: the capability is declared, the session's long-poll asks with wait_s 25,
    and the batch arrives as notifications/claude/channel with meta from pigeond."""
    url = f"http://127.0.0.1:{stand_in.server_address[1]}"
    proc = start(tmp_path, url, "--channel")
    try:
        result = handshake(proc)
        assert result["capabilities"]["experimental"] == {"claude/channel": {}}
        assert proc.stdout is not None
        pushed = read_until(
            proc.stdout, lambda m: m.get("method") == "notifications/claude/channel"
        )
        assert pushed["params"] == {"content": BATCH, "meta": {"from": "pigeond"}}
        assert stand_in.bodies[0] == {"path": "/swarm/agent/wait", "session": SESSION, "wait_s": 25}
    finally:
        proc.kill()
        proc.communicate()


def discover(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """A 2026-07-28 client's opening request, as Claude Code 2.1.332 sends it first."""
    assert proc.stdout is not None
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    send(proc, {"id": 0, "method": "server/discover", "params": {"_meta": meta}})
    return read_until(proc.stdout, lambda m: m.get("id") == 0)


def test_with_channel_the_2026_era_is_refused_so_the_client_shakes_hands(
    tmp_path: Path, stand_in: WaitStandIn
) -> None:
    """--channel: server/discover is not served (Claude Code drops channel notifications on
    a 2026-07-28 connection); the handshake after it declares the channel."""
    url = f"http://127.0.0.1:{stand_in.server_address[1]}"
    proc = start(tmp_path, url, "--channel")
    try:
        assert discover(proc)["error"]["code"] == -32601  # method not found
        result = handshake(proc)
        assert result["protocolVersion"] == "2025-11-25"
        assert result["capabilities"]["experimental"] == {"claude/channel": {}}
    finally:
        proc.kill()
        proc.communicate()


def test_without_channel_the_2026_era_is_served(tmp_path: Path, stand_in: WaitStandIn) -> None:
    """No --channel: server/discover answers (both protocol eras are served)."""
    url = f"http://127.0.0.1:{stand_in.server_address[1]}"
    proc = start(tmp_path, url)
    try:
        assert "2026-07-28" in discover(proc)["result"]["supportedVersions"]
    finally:
        proc.kill()
        proc.communicate()


def test_without_channel_nothing_is_declared_or_polled(
    tmp_path: Path, stand_in: WaitStandIn
) -> None:
    """No --channel: no claude/channel capability, and no wait is asked for."""
    url = f"http://127.0.0.1:{stand_in.server_address[1]}"
    proc = start(tmp_path, url)
    try:
        result = handshake(proc)
        assert "experimental" not in result["capabilities"]
        assert proc.stdout is not None
        read_until(proc.stdout, lambda m: m.get("id") == 2)
    finally:
        proc.kill()
        proc.communicate()
    assert stand_in.bodies == []


def test_channel_outside_claude_code_is_a_usage_error(tmp_path: Path) -> None:
    """--channel without CLAUDE_CODE_SESSION_ID: one line, exit 2."""
    env = isolated_env(tmp_path / "home")
    done = subprocess.run(
        [PIGEON_MCP, "--channel"],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 2
    assert (
        done.stderr
        == "pigeon-mcp: --channel needs a Claude Code session (CLAUDE_CODE_SESSION_ID)\n"
    )
