"""Agents in the real opencode whose fake model calls pigeond's plugin tools, and the
pigeond beside them: what the end-to-end tests of the tools share.

The fake model calls a tool when told ``CALL <tool>#<call id> <json>`` (see
:mod:`testkit.tool_script`); what the tool returned is read from opencode's
transcript (the tool part) and from what opencode sent back to the model.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testkit import polling
from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S

TURN_ARGS = ("--delivery", "turn", "--batch-max", "10", "--status-poll-s", "0.2")
TOOL_TIMEOUT_S = PATIENCE_S
OPENING = re.compile(r"^<swarm_message ([^>]*)>")


def start_pigeond(
    factory: DaemonFactory,
    tmp_path: Path,
    server: OpencodeServer,
    port: int,
    extra_args: tuple[str, ...] = (),
) -> DaemonProcess:
    """pigeond on ``port`` (where the plugin's tools call it), delivering to ``server``
    in turns; ``extra_args`` add options."""
    listen = f"tcp:{port}:interface=127.0.0.1"
    return factory.start(
        tmp_path / "p.db", opencode_url=server.url, listen=listen,
        extra_args=TURN_ARGS + extra_args,
    )  # fmt: skip


def wait_until(check: Callable[[], Any], what: str, timeout_s: float = TOOL_TIMEOUT_S) -> Any:
    """testkit/polling.py's wait_until, with what is awaited first (as these tests read)."""
    return polling.wait_until(check, timeout_s, what, every_s=0.05)


class Agent:
    """One opencode session whose fake model is told which tool to call."""

    def __init__(self, server: OpencodeServer, llm: FakeLLM, directory: str, title: str) -> None:
        self.server = server
        self.llm = llm
        self.directory = server.dirs[directory]
        self.id = server.create_session(self.directory, title)

    def call(self, tool: str, args: object, call_id: str | None = None) -> dict[str, Any]:
        """Make the model call ``tool``; wait until the model has the result; its tool part."""
        call_id = call_id or "call_" + uuid.uuid4().hex[:20]
        answers_before = self.answers(call_id)
        self.start_call(tool, args, call_id)
        return self.finish_call(call_id, answers_before)

    def start_call(self, tool: str, args: object, call_id: str) -> None:
        prompt = f"CALL {tool}#{call_id} {json.dumps(args)}"
        assert self.server.prompt_async(self.id, None, prompt) == 204

    def finish_call(self, call_id: str, answers_before: int = 0) -> dict[str, Any]:
        """Wait until the model has the call's result and the session is idle; the tool part."""
        wait_until(lambda: self.answers(call_id) > answers_before, "the result back to the model")
        self.server.wait_idle(self.id, self.directory, timeout_s=TOOL_TIMEOUT_S)
        part = self.tool_part(call_id)
        assert part is not None
        return part

    def tool_part(self, call_id: str, status: str | None = None) -> dict[str, Any] | None:
        """The newest tool part of ``call_id`` in the transcript (in ``status``, if given)."""
        parts = [
            p
            for p in self.server.tool_parts(self.id)
            if p.get("callID") == call_id and status in (None, p["state"]["status"])
        ]
        return parts[-1] if parts else None

    def answers(self, call_id: str) -> int:
        """How many times opencode sent the model a result for ``call_id``."""
        return sum(
            1
            for c in self.llm.completions(session=self.id)
            if c.tool_result is not None and c.tool_result.call_id == call_id
        )

    def model_saw(self, call_id: str) -> str:
        """The tool result opencode sent back to the model for ``call_id``."""
        results = [c.tool_result for c in self.llm.completions(session=self.id) if c.tool_result]
        return [r.content for r in results if r.call_id == call_id][-1]

    def envelopes(self) -> list[tuple[dict[str, str], str]]:
        """(opening tag attributes, whole text) of each swarm envelope in the transcript."""
        found = []
        for text in self.server.user_texts(self.id):
            match = OPENING.match(text)
            if match:
                found.append((dict(re.findall(r'(\w+)="([^"]*)"', match.group(1))), text))
        return found
