"""``pigeon-send``: post one message to the daemon and print its msg_id.

Exit codes: 0 accepted, 1 rejected (4xx; the daemon's error is printed),
2 usage error, 3 daemon unreachable (after ``--retry-for``), timed out, 5xx, or
still refusing with 429 (too many messages) when the retry budget is spent.

It finds the daemon and its token as every client does (see
:mod:`pigeond.credentials`): the user's private Unix socket first, else TCP
with the bearer token.  Every try of one send carries the same msg_id, made here
when ``--msg-id`` is not given: the daemon takes a msg_id it already has, with the
same content, as the same message, so a retry never sends twice.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

from pigeond.cli.daemon_http import (
    DaemonAnswer,
    UsageError,
    call_daemon,
    closed_system_socket,
    turned_away_line,
    unreachable_line,
)
from pigeond.cli.pigeon_send_args import (
    DEFAULT_TIMEOUT_S,
    DEFAULT_UNTIL,
    DEFAULT_WAIT_S,
    MAX_RETRY_FOR_S,
    build_parser,
)
from pigeond.credentials import (
    DEFAULT_URL,
    SYSTEM_SOCKET,
    TokenError,
    client_token,
    daemon_address,
)
from pigeond.ids import make_msg_id
from pigeond.model import RECEIPT_STAGES, STEER_PRIORITY, VIA_TERMINAL, receipt_stage
from pigeond.terminal import visible

__all__ = [
    "DEFAULT_URL",
    "DaemonAnswer",
    "UsageError",
    "build_parser",
    "call_daemon",
    "entry",
    "main",
]

# between tries at an unreachable daemon: doubling from the first to the longest
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.25, 4.0
# What is tried again until --retry-for is spent: no daemon listening (refused, no
# socket file), a connection dropped (reset, closed before an answer), and these answers.
RETRIED_ERRORS: Final = (ConnectionError, FileNotFoundError)
TOO_MANY, UNAVAILABLE = 429, 503
RETRIED_STATUSES: Final = (TOO_MANY, UNAVAILABLE)
WAIT_POLL_S = 0.5
ENDED = ("failed", "expired", "cancelled")
EXIT_ACCEPTED, EXIT_REJECTED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


# Set in the environment of what an agent runs (opencode's shell and plugin, Claude Code's
# Bash tool, Codex's sandbox): a pigeon-send under one is an agent's, never a person's.
AGENT_ENV_MARKERS: Final = (
    "OPENCODE", "OPENCODE_SESSION_ID", "CLAUDECODE", "CLAUDE_CODE_SESSION_ID", "CODEX_SANDBOX",
)  # fmt: skip


def at_a_terminal(env: Mapping[str, str], stdin: IO[str], stderr: IO[str]) -> bool:
    """Whether a person runs this at a terminal: stdin (or, with the payload piped in,
    stderr) is one, and no agent's marker is in the environment.  pigeond believes it only
    if the kernel agrees (the process has a terminal and no agent above it)."""
    if any(env.get(marker) for marker in AGENT_ENV_MARKERS):
        return False
    return any(_isatty(stream) for stream in (stdin, stderr))


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def build_request(
    args: argparse.Namespace, env: Mapping[str, str], stdin: IO[str], terminal: bool = False
) -> dict[str, Any]:
    if args.channel is not None and args.target is not None:
        raise UsageError("give no TO with --channel: --channel NAME PAYLOAD")
    if args.channel is None and args.target is None:
        raise UsageError("give a target session and a payload (or --channel NAME and a payload)")
    payload = args.payload
    if payload == "-":
        payload = stdin.read()
    sender = args.sender if args.sender is not None else env.get("OPENCODE_SESSION_ID", "")
    if not sender:
        raise UsageError("no sender: pass --from or set OPENCODE_SESSION_ID")
    body: dict[str, Any] = {"from": sender, "payload": payload}
    if args.channel is not None:
        body["channel"] = args.channel
    else:
        body["to"] = args.target
    for key, value in (
        ("kind", args.kind),
        ("priority", args.priority),
        ("steer", args.steer),
        ("reply_to", args.reply_to),
        ("thread", args.thread),
        ("msg_id", args.msg_id),
        ("ttl_s", args.ttl),
        ("expects_reply", args.expects_reply),
        ("reply_within_s", args.reply_within),
    ):
        if value is not None:
            body[key] = value
    if terminal:
        body["via"] = VIA_TERMINAL  # the message says from_verified="person" if pigeond agrees
    return body


def check_options(args: argparse.Namespace) -> None:
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if args.ttl is not None and args.ttl <= 0:
        raise UsageError("--ttl must be a positive number of seconds")
    if args.reply_within is not None and args.reply_within <= 0:
        raise UsageError("--reply-within must be a positive number of seconds")
    if not 0 <= args.retry_for <= MAX_RETRY_FOR_S:
        raise UsageError(f"--retry-for must be from 0 to {MAX_RETRY_FOR_S:g} seconds")
    if args.steer and args.priority != STEER_PRIORITY:
        raise UsageError(f"--steer goes with --priority {STEER_PRIORITY}")
    if args.until is not None and not args.wait:
        raise UsageError("--until goes with --wait")


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: IO[str] | None = None,
    *,
    system_socket: str = SYSTEM_SOCKET,
) -> int:
    env = os.environ if env is None else env
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code else EXIT_ACCEPTED
    address = daemon_address(args.url, env, system_socket=system_socket, default_url=DEFAULT_URL)
    url = address.url
    # the system service's socket is closed to this user: the TCP port is no way round
    closed = closed_system_socket(address, system_socket)
    retry_for = 0.0 if closed else args.retry_for
    try:
        stdin = stdin or sys.stdin
        body = build_request(args, env, stdin, at_a_terminal(env, stdin, sys.stderr))
        check_options(args)
        token = client_token(env)
        request_timeout = request_timeout_s(args.timeout, wait=args.wait)
        body = {"msg_id": make_msg_id(int(time.time() * 1000))} | body
        sent = send_with_retries(url, body, request_timeout, token, retry_for, _say_retrying)
    except (UsageError, TokenError) as e:
        _say(str(e))
        return EXIT_USAGE
    except UnicodeDecodeError:
        _say("the payload on stdin is not valid UTF-8")
        return EXIT_USAGE
    except GaveUp as e:
        line = unreachable_line(address, e.error, system_socket)
        tried = "" if closed else f"; {e.effort.said(retry_for)}"
        _say(f"{line}{tried}; {_fate(e.error, body)}")
        return EXIT_UNAVAILABLE
    except (OSError, TimeoutError) as e:
        _say(unreachable_line(address, e, system_socket))
        return EXIT_UNAVAILABLE
    answer = sent.answer
    error = answer.error
    if 200 <= answer.status < 300 and "msg_id" in answer.body:
        msg_id = str(answer.body["msg_id"])
        print(msg_id, flush=True)
        held = answer.body.get("held")
        if isinstance(held, dict):  # stored, but a brake holds it for a person
            _say(f"held: {held.get('reason')} (pigeon held lists it; pigeon release delivers it)")
        if args.wait:
            return wait_for_copies(
                url, _waited_ids(msg_id, answer.body), args.timeout or DEFAULT_WAIT_S,
                request_timeout, token, until=args.until or DEFAULT_UNTIL,
            )  # fmt: skip
        return EXIT_ACCEPTED
    if answer.status == TOO_MANY:
        _say(
            f"NOT sent, pigeond is refusing more for now ({answer.status}): {error};"
            f" still refused after {sent.effort.said(retry_for)}; {_again(body)}"
        )
        return EXIT_UNAVAILABLE
    if 400 <= answer.status < 500:
        turned_away = turned_away_line(address, answer, system_socket)
        _say(turned_away or f"rejected ({answer.status}): {error}")
        return EXIT_REJECTED
    tried = f"; {sent.effort.said(retry_for)}" if answer.status == UNAVAILABLE else ""
    _say(f"daemon error ({answer.status}): {error}{tried}")
    return EXIT_UNAVAILABLE


def request_timeout_s(timeout: float | None, *, wait: bool) -> float:
    """How long one request may take: ``--timeout``; with ``--wait``, where it is the
    whole wait, at most the default for each request."""
    if timeout is None:
        return DEFAULT_TIMEOUT_S
    return min(timeout, DEFAULT_TIMEOUT_S) if wait else timeout


def _again(body: Mapping[str, Any]) -> str:
    return f"sending again with --msg-id {body['msg_id']} is safe (never sent twice)"


def _fate(error: OSError, body: Mapping[str, Any]) -> str:
    """What became of a send whose last try failed with ``error``."""
    if isinstance(error, ConnectionRefusedError | FileNotFoundError):
        return "nothing was sent"
    return f"it may have arrived: {_again(body)}"


def _say(line: str) -> None:
    """One line on stderr, escaped: it may hold the daemon's or the OS's text."""
    print(f"pigeon-send: {visible(line)}", file=sys.stderr, flush=True)


def _say_retrying(why: str, retry_for_s: float) -> None:
    _say(f"{why}; trying again for up to {retry_for_s:g} s (--retry-for)")


@dataclass(frozen=True, slots=True)
class Effort:
    """How many tries a send took, over how long."""

    tries: int
    waited_s: float

    def said(self, retry_for_s: float) -> str:
        tries = f"{self.tries} {'try' if self.tries == 1 else 'tries'}"
        return f"{tries} over {self.waited_s:.1f} s (--retry-for {retry_for_s:g})"


@dataclass(frozen=True, slots=True)
class Sent:
    """The last answer to a send."""

    answer: DaemonAnswer
    effort: Effort


class GaveUp(Exception):
    """The daemon stayed unreachable until ``--retry-for`` was spent."""

    def __init__(self, error: OSError, effort: Effort) -> None:
        super().__init__(str(error))
        self.error, self.effort = error, effort


def send_with_retries(
    url: str,
    body: dict[str, Any],
    request_timeout: float,
    token: str | None,
    retry_for_s: float,
    retrying: Callable[[str, float], None] = lambda why, retry_for_s: None,
) -> Sent:
    """POST the message (``body`` carries its msg_id, so no try sends twice), trying again
    for at most ``retry_for_s`` while the daemon is unreachable (:data:`RETRIED_ERRORS`,
    backing off from FIRST_BACKOFF_S to MAX_BACKOFF_S) or answers 503 (the same, or its
    ``Retry-After``) or 429 (after its ``Retry-After``, when that ends within the budget).

    ``retrying`` hears why, once, before the first wait.  Raises GaveUp when unreachable
    to the end; other errors (a timeout, a socket closed to the caller) at once."""
    started = time.monotonic()
    backoff = FIRST_BACKOFF_S
    tries = 0
    while True:
        tries += 1
        failure: OSError | None = None
        try:
            answer = call_daemon(url, "POST", "/swarm/send", body, request_timeout, token)
        except RETRIED_ERRORS as e:
            why, failure, wait = f"daemon at {url} unreachable: {e}", e, backoff
        else:
            if answer.status not in RETRIED_STATUSES:
                return Sent(answer, Effort(tries, time.monotonic() - started))
            why = f"daemon at {url} answered {answer.status}: {answer.error}"
            wait = backoff if answer.retry_after_s is None else answer.retry_after_s
        effort = Effort(tries, time.monotonic() - started)
        left = retry_for_s - effort.waited_s
        if left <= 0 or (failure is None and answer.status == TOO_MANY and wait > left):
            if failure is not None:
                raise GaveUp(failure, effort)
            return Sent(answer, effort)
        if tries == 1:
            retrying(why, retry_for_s)
        time.sleep(min(wait, left))
        backoff = min(backoff * 2, MAX_BACKOFF_S)


def _waited_ids(msg_id: str, accepted: dict[str, Any]) -> list[str]:
    """What ``--wait`` follows: the message, or for a channel message (never delivered
    itself) each member's copy the 202 listed."""
    deliveries = accepted.get("deliveries")
    if not isinstance(deliveries, list):
        return [msg_id]
    return [str(d["msg_id"]) for d in deliveries if isinstance(d, dict) and "msg_id" in d]


def wait_for_copies(
    url: str,
    msg_ids: list[str],
    limit_s: float,
    request_timeout: float,
    token: str | None = None,
    *,
    until: str = DEFAULT_UNTIL,
) -> int:
    """:func:`wait_for_delivery` for each of ``msg_ids`` within one time limit: 0 when every
    one reached ``until``, else the first other exit code (a channel with no member to
    deliver to has nothing to wait for)."""
    deadline = time.monotonic() + limit_s
    for msg_id in msg_ids:
        left = max(deadline - time.monotonic(), 0.0)
        code = wait_for_delivery(url, msg_id, left, request_timeout, token, until=until)
        if code != EXIT_ACCEPTED:
            return code
    return EXIT_ACCEPTED


def wait_for_delivery(
    url: str,
    msg_id: str,
    limit_s: float,
    request_timeout: float,
    token: str | None = None,
    *,
    until: str = DEFAULT_UNTIL,
) -> int:
    """Poll ``GET /swarm/message/<id>`` until its receipt reaches ``until`` (0), it ends (1)
    or time is up (3).  A hand-off queued again on the way (never seen) is waited for."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            answer = call_daemon(
                url, "GET", f"/swarm/message/{msg_id}", None, request_timeout, token
            )
        except (OSError, TimeoutError) as e:
            _say(f"lost the daemon while waiting: {e}")
            return EXIT_UNAVAILABLE
        state = str(answer.body.get("state", ""))
        stage = receipt_stage(state, answer.body.get("verified_at"), answer.body.get("answered_at"))
        if answer.status == 200 and RECEIPT_STAGES.index(stage) >= RECEIPT_STAGES.index(until):
            return EXIT_ACCEPTED
        if answer.status == 200 and state in ENDED:
            reason = answer.body.get("last_error") or state
            _say(f"{msg_id} {state}: {reason}")
            return EXIT_REJECTED
        if answer.status != 200:
            _say(f"cannot follow {msg_id}: HTTP {answer.status}")
            return EXIT_UNAVAILABLE
        if time.monotonic() >= deadline:
            _say(f"{msg_id} not {until} after {limit_s:g} s (still {stage})")
            return EXIT_UNAVAILABLE
        time.sleep(min(WAIT_POLL_S, max(deadline - time.monotonic(), 0)))


def entry() -> None:
    sys.exit(main())
