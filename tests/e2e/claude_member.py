"""A real Claude Code session as a member of the swarm, for the end-to-end tests: its
project's hooks call ``pigeon-hook`` (as ``pigeon install-claude`` writes them), and each
``claude -p`` run is one or more turns of the one session."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from tests.claude_code import ClaudeCode, ClaudeRun
from tests.daemon_process import DaemonProcess

HOOK = Path(sys.executable).parent / "pigeon-hook"
FEEDBACK = "Stop hook feedback:\n"
OPENING = re.compile(r'^<swarm_message [^>]*\bmsg_id="([^"]*)"', re.MULTILINE)
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

    def turn(self, prompt: str) -> ClaudeRun:
        """One ``claude -p`` run of the session: its first creates it, the rest resume it."""
        flag = "--session-id" if self.runs == 0 else "--resume"
        self.runs += 1
        run = self.claude.run(prompt, self.project, flag, self.id, env=self.env())
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

    def envelope_ids(self) -> list[str]:
        """The msg_ids of every envelope the session was given, in order, repeats kept."""
        return [i for text in self.fed_back() for i in OPENING.findall(text)]
