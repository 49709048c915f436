"""``pigeon-hook``: Claude Code's hooks, telling pigeond about a session and taking its mail.

``pigeon install-claude`` registers it for three of Claude Code's hook events; each gets
the hook's JSON on stdin (``session_id``, ``transcript_path``, ``hook_event_name`` ...):

- ``pigeon-hook session-start`` (SessionStart): ``POST /swarm/agent/claude/event`` with
  ``session_start``: pigeond registers the session and where its transcript is;
- ``pigeon-hook prompt-submit`` (UserPromptSubmit): the same with ``prompt_submit``: a
  person's turn runs now.  Neither prints anything, so neither is waited for: the request
  is made by a child process of its own (:func:`in_background`) and the hook exits at
  once, whatever pigeond does: a person's prompt is never delayed by pigeond;
- ``pigeon-hook stop`` (Stop): ``POST /swarm/agent/claude/turn-end``; when pigeond hands
  a batch off, prints ``{"decision": "block", "reason": <the envelopes>}`` so Claude Code
  runs one more turn with them (its transcript shows ``Stop hook feedback:`` and them).

It runs at every turn's end, in a person's way, so it is never in their way: it gives up
after :data:`DEADLINE_S` in all (stdin, connecting, pigeond's answer), and on any failure
(pigeond down, slow, a 4xx, an answer that is not what the contract says, malformed hook
input) it exits 0 with nothing on stdout and one escaped line on stderr: Claude Code then
goes on as if there were no hook.  It never exits 2 (a Stop hook's exit 2 would block the
turn with its stderr as the reason).  Stdout is exactly one JSON object or nothing:
``json.dumps`` frames whatever a sender wrote.

It finds pigeond as ``pigeon-send`` does (:func:`pigeond.credentials.daemon_address`,
:func:`pigeond.cli.daemon_http.call_daemon`) and imports nothing more than that.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import IO, Any, Final

from pigeond.cli.daemon_http import UsageError, call_daemon
from pigeond.credentials import TokenError, client_token, daemon_address
from pigeond.model import RUNTIME_IDS, Runtime
from pigeond.terminal import visible

PROG: Final = "pigeon-hook"
# The whole run's bound; pigeond answers a turn's end within about 1 s.
DEADLINE_S: Final = 2.0
STDIN_LIMIT: Final = 1024 * 1024
EVENT_ROUTE: Final = "/swarm/agent/claude/event"
TURN_END_ROUTE: Final = "/swarm/agent/claude/turn-end"
CLAUDE_SESSION_RE: Final = RUNTIME_IDS[Runtime.CLAUDE]


@dataclass(frozen=True, slots=True)
class Event:
    """One ``pigeon-hook`` command: the Claude Code hook it serves and what it sends."""

    hook: str  # Claude Code's hook_event_name
    daemon_event: str | None  # the event route's "event", None for the turn-end route


# The commands, declared once: install-claude registers each for its hook.
EVENTS: Final = {
    "session-start": Event("SessionStart", "session_start"),
    "prompt-submit": Event("UserPromptSubmit", "prompt_submit"),
    "stop": Event("Stop", None),
}
USAGE: Final = f"usage: {PROG} {{{'|'.join(EVENTS)}}} (reads Claude Code's hook JSON on stdin)"


class HookFailure(Exception):
    """Why the hook gives up; one line, said on stderr."""


class _Overdue(BaseException):
    """The deadline passed (raised by the alarm, wherever the hook was)."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Overdue


def read_input(stdin: IO[str]) -> dict[str, Any]:
    """The hook's JSON object from ``stdin`` (at most :data:`STDIN_LIMIT` characters)."""
    if stdin.isatty():
        raise HookFailure("stdin is a terminal: Claude Code gives a hook its JSON on stdin")
    raw = stdin.read(STDIN_LIMIT + 1)
    if len(raw) > STDIN_LIMIT:
        raise HookFailure(f"hook input longer than {STDIN_LIMIT} characters")
    try:
        parsed = json.loads(raw)
    except ValueError as e:
        raise HookFailure(f"hook input is not JSON: {e}") from e
    if not isinstance(parsed, dict):
        raise HookFailure("hook input is not a JSON object")
    return parsed


def request_body(event: Event, hook: Mapping[str, Any]) -> dict[str, Any]:
    """What the route gets, from validated hook input."""
    session = hook.get("session_id")
    if not isinstance(session, str) or not CLAUDE_SESSION_RE.fullmatch(session):
        raise HookFailure("hook input has no Claude Code session_id (a lowercase UUID)")
    transcript = hook.get("transcript_path")
    if not isinstance(transcript, str) or not os.path.isabs(transcript) or "\0" in transcript:
        raise HookFailure("hook input has no absolute transcript_path")
    said = hook.get("hook_event_name")
    if said is not None and said != event.hook:
        raise HookFailure(f"hook input is for {said!r}, but this command serves {event.hook}")
    body: dict[str, Any] = {"session": session, "transcript_path": transcript}
    if event.daemon_event is not None:
        return {"event": event.daemon_event} | body
    active = hook.get("stop_hook_active", False)
    if not isinstance(active, bool):
        raise HookFailure("hook input's stop_hook_active is not true or false")
    return body | {"stop_hook_active": active}


def block_output(answer: Mapping[str, Any]) -> str | None:
    """The Stop hook's stdout for pigeond's turn-end answer: the block JSON, or None."""
    if "text" not in answer:
        raise HookFailure("pigeond's answer to the turn's end has no text")
    text = answer["text"]
    if text is None:
        return None
    if not isinstance(text, str) or not text.strip():
        raise HookFailure("pigeond's answer has a text that is neither null nor words")
    return json.dumps({"decision": "block", "reason": text})


def ask_pigeond(event: Event, body: dict[str, Any], env: Mapping[str, str], deadline: float) -> Any:
    """pigeond's JSON answer to the event's route (HookFailure for anything but a 200)."""
    address = daemon_address(None, env)
    try:
        token = client_token(env)
    except TokenError as e:
        raise HookFailure(str(e)) from e
    route = EVENT_ROUTE if event.daemon_event is not None else TURN_END_ROUTE
    timeout = max(0.05, deadline - time.monotonic())
    try:
        answer = call_daemon(address.url, "POST", route, body, timeout, token)
    except UsageError as e:
        raise HookFailure(f"{address.why}: {e}") from e
    except OSError as e:
        raise HookFailure(f"cannot reach pigeond at {address.url} ({address.why}): {e}") from e
    if answer.status != 200:
        error = answer.body.get("error")
        said = f": {error}" if isinstance(error, str) else ""
        raise HookFailure(f"pigeond answered {answer.status}{said}")
    return answer.body


def run(
    argv: Sequence[str],
    stdin: IO[str],
    stdout: IO[str],
    stderr: IO[str],
    env: Mapping[str, str],
    deadline: float,
    detach: Callable[[Callable[[], object]], None] | None = None,
) -> None:
    """One hook run; HookFailure (or _Overdue) says why it gave up.  ``detach`` runs what
    needs no answer where the session does not wait for it (None: here and now)."""
    if len(argv) != 1 or argv[0] not in EVENTS:
        raise HookFailure(USAGE)
    event = EVENTS[argv[0]]
    body = request_body(event, read_input(stdin))
    if event.daemon_event is not None:
        # nothing to print: a person's prompt, or the session's start, never waits for it
        told = detach if detach is not None else _now
        told(lambda: ask_pigeond(event, body, env, time.monotonic() + DEADLINE_S))
        return
    answer = ask_pigeond(event, body, env, deadline)
    printed = block_output(answer)
    if printed is not None:
        stdout.write(printed + "\n")
        stdout.flush()


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
    detach: Callable[[Callable[[], object]], None] | None = None,
) -> int:
    """Always 0: a hook that fails must leave Claude Code's turn as it was."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    deadline = time.monotonic() + DEADLINE_S
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, DEADLINE_S)
            run(argv, stdin, stdout, stderr, env, deadline, detach)
        finally:  # the alarm is off before anything is said
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    except HookFailure as e:
        _say(stderr, str(e))
    except _Overdue:
        _say(stderr, f"pigeond did not answer within {DEADLINE_S:g} s; going on without it")
    except OSError as e:  # stdout or stdin closed under us
        _say(stderr, f"cannot talk to Claude Code: {e}")
    return 0


def _say(stderr: IO[str], line: str) -> None:
    try:
        stderr.write(f"{PROG}: {visible(line)}\n")
        stderr.flush()
    except (OSError, ValueError):
        pass  # nowhere left to say it


def _now(call: Callable[[], object]) -> None:
    call()


def in_background(call: Callable[[], object]) -> None:
    """Run ``call`` in a child process of its own that nobody waits for, bounded by
    :data:`DEADLINE_S` too: the hook itself exits at once.  The child has no stdout or
    stderr (Claude Code's pipes are closed in it), so what it meets is said nowhere: a
    session event is a hint to pigeond (the turn's end registers the session anyway)."""
    if os.fork() != 0:
        return
    try:
        os.setsid()
        nowhere = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(nowhere, fd)
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, DEADLINE_S)
        call()
    except BaseException:
        pass
    finally:
        os._exit(0)


def entry() -> None:
    sys.exit(main(detach=in_background))
