"""A real Claude Code session as a member of the swarm, for the end-to-end tests: its
project's hooks call ``pigeon-hook`` (as ``pigeon install-claude`` writes them), and each
``claude -p`` run is one or more turns of the one session; or the session is the
interactive one, under tmux, with pigeond's channel (:meth:`ClaudeMember.start_tui`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from testkit.daemon_process import DaemonProcess
from testkit.polling import PATIENCE_S
from tests.claude_code import ClaudeCode, ClaudeRun
from tests.claude_tui import ClaudeTui, DeadEndProxy, seed_config, tui_env

HOOK = Path(sys.executable).parent / "pigeon-hook"
MCP_SERVER = Path(sys.executable).parent / "pigeon-mcp"
FEEDBACK = "Stop hook feedback:\n"
OPENING = re.compile(r'^<swarm_message [^>]*\bmsg_id="([^"]*)"', re.MULTILINE)
CHANNEL_SERVER = "pigeon"  # the MCP server's name: the channel is server:pigeon
HOOK_EVENTS = {"SessionStart": "session-start", "UserPromptSubmit": "prompt-submit", "Stop": "stop"}


def hooks_settings(stop_command: str | None = None) -> dict[str, Any]:
    """Claude Code's hooks calling pigeon-hook; ``stop_command`` replaces the Stop one."""
    hooks: dict[str, Any] = {}
    for event, verb in HOOK_EVENTS.items():
        command = f"{HOOK} {verb}"
        if event == "Stop" and stop_command is not None:
            command = stop_command
        hooks[event] = [{"hooks": [{"type": "command", "command": command}]}]
    return {"hooks": hooks}


def send(daemon: DaemonProcess, to: str, payload: str, **fields: object) -> str:
    """``POST /swarm/send`` from ``ses_tester``; the msg_id it was accepted as."""
    body = {"from": "ses_tester", "to": to, "payload": payload, **fields}
    status, answer = daemon.request_json("POST", "/swarm/send", body)
    assert status == 202, answer
    return str(answer["msg_id"])


def stored(daemon: DaemonProcess, msg_id: str) -> dict[str, Any]:
    """``GET /swarm/message/<msg_id>``."""
    status, found = daemon.request_json("GET", f"/swarm/message/{msg_id}")
    assert status == 200 and isinstance(found, dict), found
    return found


def receipt(daemon: DaemonProcess, msg_id: str) -> str:
    return str(stored(daemon, msg_id)["receipt"])


class ClaudeMember:
    """One Claude Code session (a fixed id) in ``project``, reaching ``daemon``."""

    def __init__(self, claude: ClaudeCode, project: Path, daemon: DaemonProcess) -> None:
        self.claude = claude
        self.project = project
        self.daemon = daemon
        self.id = str(uuid.uuid4())
        self.runs = 0
        project.mkdir(parents=True, exist_ok=True)

    def install_hooks(self, stop_command: str | None = None) -> None:
        settings = self.project / ".claude" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps(hooks_settings(stop_command)))

    def env(self) -> dict[str, str]:
        return {"PIGEOND_URL": self.daemon.base_url, "PIGEOND_TOKEN": self.daemon.token}

    def turn(self, prompt: str, *args: str) -> ClaudeRun:
        """One ``claude -p`` run of the session: its first creates it, the rest resume it."""
        flag = "--session-id" if self.runs == 0 else "--resume"
        self.runs += 1
        run = self.claude.run(prompt, self.project, flag, self.id, *args, env=self.env())
        assert run.returncode == 0, (run.stdout, run.stderr)
        return run

    def start_turn(self, prompt: str) -> subprocess.Popen[str]:
        """The same run, started in the background."""
        flag = "--session-id" if self.runs == 0 else "--resume"
        self.runs += 1
        command = [str(self.claude.binary), "-p", prompt, "--output-format", "json", flag, self.id]
        return subprocess.Popen(
            command, cwd=self.project, env=self.claude.env(self.env()),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def start_tui(
        self, proxy: DeadEndProxy, folder: Path, timeout_s: float = PATIENCE_S
    ) -> ClaudeTui:
        """The session, interactive, with ``pigeon-mcp --channel`` as its channel; started,
        its channels' consent given; files (MCP config, tmux socket) in ``folder``."""
        config = folder / "mcp.json"
        server = {"command": str(MCP_SERVER), "args": ["--channel"]}
        config.write_text(json.dumps({"mcpServers": {CHANNEL_SERVER: server}}))
        seed_config(self.claude.home, self.project)
        args = ["--mcp-config", str(config), "--session-id", self.id]
        args += ["--dangerously-load-development-channels", f"server:{CHANNEL_SERVER}"]
        tui = ClaudeTui(self.claude, self.project, tui_env(self.claude, proxy, self.env()), args,
                        folder)  # fmt: skip
        try:
            tui.accept(timeout_s)
        except BaseException:
            tui.close()
            raise
        return tui

    def transcript(self) -> Path:
        found = list((self.claude.home / ".claude" / "projects").glob(f"*/{self.id}.jsonl"))
        assert len(found) == 1, found
        return found[0]

    def entries(self) -> list[dict[str, Any]]:
        lines = self.transcript().read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def fed_back(self) -> list[str]:
        """The texts the Stop hook fed back, one per hand-off, in order."""
        texts = []
        for entry in self.entries():
            content = (
                entry.get("message", {}).get("content") if entry.get("type") == "user" else None
            )
            if isinstance(content, str) and content.startswith(FEEDBACK):
                texts.append(content[len(FEEDBACK) :])
        return texts

    def user_texts(self) -> list[str]:
        """The text of every user entry (a prompt, a hook's feedback, a channel's push),
        tool results left out."""
        texts = []
        for entry in self.entries():
            content = (
                entry.get("message", {}).get("content") if entry.get("type") == "user" else None
            )
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            for block in blocks if isinstance(blocks, list) else []:
                if isinstance(block, dict) and block.get("type") == "text":
                    texts.append(str(block.get("text")))
        return texts

    def pushed(self) -> list[str]:
        """The texts the channel pushed, as the session stored them (user entries whose
        origin is the channel)."""
        return [
            str(entry["message"]["content"])
            for entry in self.entries()
            if entry.get("type") == "user"
            and entry.get("origin") == {"kind": "channel", "server": CHANNEL_SERVER}
        ]

    def envelope_ids(self) -> list[str]:
        """The msg_ids of every envelope the session was given, in order, repeats kept."""
        return [i for text in self.fed_back() for i in OPENING.findall(text)]
