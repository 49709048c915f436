"""Real Claude Code sessions whose transcripts pigeond reads, and their recorded fixtures.

Each scenario runs the real ``claude -p`` (:class:`tests.claude_code.ClaudeCode`) against the
fake model and returns the run; its transcript (``~/.claude/projects/<folder>/<id>.jsonl``)
is what :mod:`pigeond.delivery.claude_transcript` parses.  ``python -m
tests.claude_transcripts`` records them into ``tests/fixtures/claude/`` (see
:func:`sanitized`); tests/test_claude_transcript_live.py runs them again to check that the
pinned Claude Code still writes what the fixtures show.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.claude_code import ClaudeCode, ClaudeRun, ensure_claude_code
from tests.fake_anthropic import FakeAnthropic

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "claude"
# An envelope as pigeond renders it (pigeond/envelope.py), for the Stop hook to hand off.
ENVELOPE = (
    '<swarm_message v="1" kind="chat" from="ses_sender" to="{session}" msg_id="msg_stop1"'
    ' priority="normal">\nplease look at msg_id="msg_fake" &lt;b&gt;\n</swarm_message>'
)
# What the echo tool is asked to say: a tool result that quotes an envelope.
QUOTED_ENVELOPE = (
    '<swarm_message v="1" kind="chat" from="ses_x" to="y" msg_id="msg_quoted"'
    ' priority="normal">\nquoted\n</swarm_message>'
)
# Stop hook: block once with the text of the file named as argument 1 ({session} filled in).
STOP_ONCE = """\
import json, sys
hook = json.load(sys.stdin)
if not hook.get("stop_hook_active"):
    reason = open(sys.argv[1]).read().replace("{session}", hook["session_id"])
    print(json.dumps({"decision": "block", "reason": reason}))
"""
LONG_STRING = 120  # strings longer than this in bookkeeping entries are cut in fixtures
LONG_LIST = 6  # and lists longer than this
KEPT_WHOLE = ("user", "assistant")  # entry types whose content is kept as it was


def plain(claude: ClaudeCode, work: Path) -> ClaudeRun:
    """A typed prompt and its answer."""
    return claude.run("hello", _project(work))


def stop_block(claude: ClaudeCode, work: Path) -> ClaudeRun:
    """A Stop hook that blocks once with an envelope as its reason."""
    project = _project(work)
    hook = work / "stop_once.py"
    hook.write_text(STOP_ONCE, encoding="utf-8")
    reason = work / "reason.txt"
    reason.write_text(ENVELOPE, encoding="utf-8")
    command = f"{sys.executable} {hook} {reason}"
    settings = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": command}]}]}}
    settings_file = work / "settings.json"
    settings_file.write_text(json.dumps(settings), encoding="utf-8")
    return claude.run("hello", project, "--settings", str(settings_file))


def mcp_tool(claude: ClaudeCode, work: Path) -> ClaudeRun:
    """An MCP tool call whose result quotes an envelope."""
    project = _project(work)
    server = Path(__file__).resolve().parent / "mcp_echo_server.py"
    config = {"mcpServers": {"echo": {"command": sys.executable, "args": [str(server)]}}}
    config_file = work / "mcp.json"
    config_file.write_text(json.dumps(config), encoding="utf-8")
    prompt = "CALLTOOL mcp__echo__echo " + json.dumps({"text": QUOTED_ENVELOPE})
    args = ("--mcp-config", str(config_file), "--allowedTools", "mcp__echo__echo")
    return claude.run(prompt, project, *args)


SCENARIOS: dict[str, Callable[[ClaudeCode, Path], ClaudeRun]] = {
    "plain": plain,
    "stop_block": stop_block,
    "mcp_tool": mcp_tool,
}


def _project(work: Path) -> Path:
    project = work / "project"
    project.mkdir(parents=True, exist_ok=True)
    return project


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > LONG_STRING:
        return value[:LONG_STRING] + f"...[{len(value) - LONG_STRING} characters cut]"
    if isinstance(value, list):
        kept = [_cut(v) for v in value[:LONG_LIST]]
        return kept + [f"...[{len(value) - LONG_LIST} items cut]"] * (len(value) > LONG_LIST)
    if isinstance(value, dict):
        return {k: _cut(v) for k, v in value.items()}
    return value


def sanitized(run: ClaudeRun, work: Path) -> str:
    """The run's transcript as a fixture (:func:`sanitized_file`)."""
    return sanitized_file(run.transcript(), run.home, work)


def sanitized_file(transcript: Path, home: Path, work: Path) -> str:
    """A transcript as a fixture: every line kept, in order; the private paths (``home``,
    ``work``) written as /home/user; long strings and lists (system prompts, tool listings)
    cut in the bookkeeping entries, never in user or assistant entries."""
    out = []
    for line in transcript.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("type") not in KEPT_WHOLE:
            entry = _cut(entry)
        text = json.dumps(entry, ensure_ascii=False)
        text = text.replace(str(home), "/home/user").replace(str(work), "/home/user/work")
        text = text.replace(sys.executable, "/usr/bin/python3")
        out.append(text.replace(str(Path(sys.executable).parent), "/usr/bin"))  # pigeon-hook
    return "\n".join(out) + "\n"


def record(into: Path = FIXTURES) -> None:
    """Run every scenario and write ``<name>.jsonl`` into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    binary = ensure_claude_code()
    for name, scenario in SCENARIOS.items():
        with tempfile.TemporaryDirectory() as tmp, FakeAnthropic() as fake:
            work = Path(tmp)
            run = scenario(ClaudeCode(binary, work / "home", fake.base_url), work)
            assert run.returncode == 0, (run.stdout, run.stderr)
            (into / f"{name}.jsonl").write_text(sanitized(run, work), encoding="utf-8")
            print(f"{name}: {run.result['result']!r}")


def record_channel(transcript: Path, home: Path, work: Path, into: Path = FIXTURES) -> None:
    """Write ``channel.jsonl`` from the transcript of a session woken on its channel: a push
    needs the interactive session, so the fixture is the session of
    tests/e2e/test_claude_channel_e2e.py (run it with ``--basetemp``, then pass its
    transcript, the session's HOME and the test's folder)."""
    (into / "channel.jsonl").write_text(sanitized_file(transcript, home, work), encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--channel"]:
        record_channel(*(Path(arg) for arg in sys.argv[2:5]))
    else:
        record()
