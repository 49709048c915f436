"""``pigeon-send``: post one message to the daemon and print its msg_id.

Exit codes: 0 accepted, 1 rejected (4xx; the daemon's error is printed),
2 usage error, 3 daemon unreachable, timed out, 5xx, or still refusing with
429 (too many messages) when the retry budget is spent.  Blocking stdlib HTTP
on purpose: a one-shot CLI needs no reactor.

It finds the daemon and its token as every client does (see
:mod:`pigeond.credentials`): the user's private Unix socket first, else TCP
with the bearer token.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlsplit

from pigeond.credentials import DEFAULT_URL, TokenError, client_token, daemon_address
from pigeond.ids import make_msg_id
from pigeond.model import KINDS, PRIORITIES, RECEIPT_MEANINGS, RECEIPT_STAGES, receipt_stage

__all__ = ["DEFAULT_URL", "DaemonAnswer", "UsageError", "call_daemon", "entry", "main"]

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_RETRY_FOR_S = 30.0
TOO_MANY = 429
DEFAULT_WAIT_S = 300.0
WAIT_POLL_S = 0.5
# What --wait can wait for: a stage of the receipt chain past "accepted" (the 202 is that).
UNTIL_STAGES = RECEIPT_STAGES[1:]
DEFAULT_UNTIL = "handed_off"
ENDED = ("failed", "expired", "cancelled")
EXIT_ACCEPTED, EXIT_REJECTED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


UNTIL_HELP = "; ".join(f"{stage}: {RECEIPT_MEANINGS[stage]}" for stage in UNTIL_STAGES)


class UsageError(ValueError):
    pass


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True, slots=True)
class DaemonAnswer:
    status: int
    body: dict[str, Any]
    retry_after_s: float | None = None


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (pigeond sends whole seconds); None when absent or odd."""
    if value is None or not value.strip().isdigit():
        return None
    return float(int(value.strip()))


def connection_for(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection and path prefix for ``http://host:port[/prefix]`` or ``unix:/path.sock``."""
    if url.startswith("unix:"):
        path = url[len("unix:") :]
        if not path:
            raise UsageError("a unix: URL needs a socket path, e.g. unix:/run/pigeond/pigeond.sock")
        return _UnixHTTPConnection(path, timeout), ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url must be http://HOST:PORT or unix:PATH, not {url!r}")
    try:
        port = parts.port
    except ValueError as e:
        raise UsageError(f"--url has a bad port: {url!r}") from e
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, port, timeout=timeout), parts.path.rstrip("/")


def call_daemon(
    url: str,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    timeout: float,
    token: str | None = None,
) -> DaemonAnswer:
    """One request; raises OSError (incl. timeouts) when the daemon cannot be reached.
    The token goes only over TCP: a Unix socket's peer is known without one."""
    conn, prefix = connection_for(url, timeout)
    try:
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"accept": "application/json"}
        if data is not None:
            headers["content-type"] = "application/json"
        if token is not None and not url.startswith("unix:"):
            headers["authorization"] = f"Bearer {token}"
        conn.request(method, prefix + path, body=data, headers=headers)
        response = conn.getresponse()
        raw = response.read()
    except http.client.HTTPException as e:
        raise OSError(f"bad answer from the daemon: {e}") from e
    finally:
        conn.close()
    try:
        parsed = json.loads(raw.decode("utf-8")) if raw else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        parsed = {"error": raw.decode("utf-8", errors="replace").strip()[:300]}
    return DaemonAnswer(
        response.status,
        parsed if isinstance(parsed, dict) else {},
        retry_after(response.getheader("retry-after")),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pigeon-send", description="Send a swarm message through pigeond."
    )
    parser.add_argument(
        "--from", dest="sender", metavar="ID", help="sender id (default $OPENCODE_SESSION_ID)"
    )
    parser.add_argument("--kind", choices=KINDS, help="message kind (default chat)")
    parser.add_argument("--priority", choices=PRIORITIES, help="priority (default normal)")
    parser.add_argument("--reply-to", metavar="MSG", help="msg_id this message answers")
    parser.add_argument(
        "--msg-id", metavar="ID", help="idempotency key (default: daemon makes one)"
    )
    parser.add_argument(
        "--ttl", type=int, metavar="S",
        help="seconds the message may wait before it expires (default: the daemon's, 24 h)",
    )  # fmt: skip
    parser.add_argument(
        "--expects-reply", action=argparse.BooleanOptionalAction, default=None,
        help="the target owes a reply (default: yes for task.assign and clarification.request)",
    )  # fmt: skip
    parser.add_argument(
        "--reply-within", type=int, metavar="S",
        help="seconds the target has to reply, from the hand-off (default: the daemon's, 1 h);"
        " implies --expects-reply",
    )  # fmt: skip
    parser.add_argument(
        "--url",
        help="daemon URL (default $PIGEOND_URL, else the user's socket"
        f" $XDG_RUNTIME_DIR/pigeond/pigeond.sock when there, else {DEFAULT_URL})",
    )
    parser.add_argument(
        "--retry-for", type=float, default=DEFAULT_RETRY_FOR_S, metavar="S",
        help="how long to keep retrying, with the same msg_id, while the daemon answers 429"
        f" (too many messages; default {DEFAULT_RETRY_FOR_S:g})",
    )  # fmt: skip
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds to wait for the daemon (default 10); with --wait, for the whole wait"
        f" (default {DEFAULT_WAIT_S:g})",
    )
    parser.add_argument(
        "--wait", action="store_true",
        help="after acceptance, wait until the message reaches --until's stage (exit 0) or"
        " fails (exit 1)",
    )  # fmt: skip
    parser.add_argument(
        "--until", choices=UNTIL_STAGES, metavar="|".join(UNTIL_STAGES),
        help=f"with --wait, the stage to wait for (default {DEFAULT_UNTIL}): {UNTIL_HELP}",
    )  # fmt: skip
    parser.add_argument(
        "--channel", metavar="NAME",
        help="send to a channel instead of a session: every member but the sender gets its own"
        " copy (see pigeon channel show NAME)",
    )  # fmt: skip
    parser.add_argument(
        "args",
        nargs="+",
        metavar="TO PAYLOAD",
        help="target session (ses_..., or @name: whoever holds the name) and payload"
        " ('-' reads stdin); no TO with --channel",
    )
    return parser


def build_request(
    args: argparse.Namespace, env: Mapping[str, str], stdin: IO[str]
) -> dict[str, Any]:
    positional: list[str] = list(args.args)
    expected = 1 if args.channel is not None else 2
    if len(positional) != expected:
        raise UsageError(
            "give a payload with --channel"
            if args.channel is not None
            else "give a target session and a payload (or --channel NAME and a payload)"
        )
    payload = positional[-1]
    if payload == "-":
        payload = stdin.read()
    sender = args.sender if args.sender is not None else env.get("OPENCODE_SESSION_ID", "")
    if not sender:
        raise UsageError("no sender: pass --from or set OPENCODE_SESSION_ID")
    body: dict[str, Any] = {"from": sender, "payload": payload}
    if args.channel is not None:
        body["channel"] = args.channel
    else:
        body["to"] = positional[0]
    for key, value in (
        ("kind", args.kind),
        ("priority", args.priority),
        ("reply_to", args.reply_to),
        ("msg_id", args.msg_id),
        ("ttl_s", args.ttl),
        ("expects_reply", args.expects_reply),
        ("reply_within_s", args.reply_within),
    ):
        if value is not None:
            body[key] = value
    return body


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: IO[str] | None = None,
) -> int:
    env = os.environ if env is None else env
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code else EXIT_ACCEPTED
    url = daemon_address(args.url, env, default_url=DEFAULT_URL).url
    try:
        body = build_request(args, env, stdin or sys.stdin)
        if args.timeout is not None and args.timeout <= 0:
            raise UsageError("--timeout must be positive")
        if args.ttl is not None and args.ttl <= 0:
            raise UsageError("--ttl must be a positive number of seconds")
        if args.reply_within is not None and args.reply_within <= 0:
            raise UsageError("--reply-within must be a positive number of seconds")
        if not 0 <= args.retry_for <= 3600:
            raise UsageError("--retry-for must be from 0 to 3600 seconds")
        if args.until is not None and not args.wait:
            raise UsageError("--until goes with --wait")
        token = client_token(env)
        request_timeout = min(args.timeout or DEFAULT_TIMEOUT_S, DEFAULT_TIMEOUT_S)
        answer = send_with_retries(url, body, request_timeout, token, args.retry_for)
    except (UsageError, TokenError) as e:
        print(f"pigeon-send: {e}", file=sys.stderr)
        return EXIT_USAGE
    except UnicodeDecodeError:
        print("pigeon-send: the payload on stdin is not valid UTF-8", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, TimeoutError) as e:
        print(f"pigeon-send: daemon at {url} unreachable: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    error = str(answer.body.get("error", "")) or f"HTTP {answer.status}"
    if 200 <= answer.status < 300 and "msg_id" in answer.body:
        msg_id = str(answer.body["msg_id"])
        print(msg_id, flush=True)
        if args.wait:
            return wait_for_copies(
                url, _waited_ids(msg_id, answer.body), args.timeout or DEFAULT_WAIT_S,
                request_timeout, token, until=args.until or DEFAULT_UNTIL,
            )  # fmt: skip
        return EXIT_ACCEPTED
    if answer.status == TOO_MANY:
        print(
            f"pigeon-send: NOT sent, pigeond is refusing more for now ({answer.status}): {error};"
            f" still refused after --retry-for {args.retry_for:g} s; sending again later is safe",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    if 400 <= answer.status < 500:
        print(f"pigeon-send: rejected ({answer.status}): {error}", file=sys.stderr)
        return EXIT_REJECTED
    print(f"pigeon-send: daemon error ({answer.status}): {error}", file=sys.stderr)
    return EXIT_UNAVAILABLE


def send_with_retries(
    url: str, body: dict[str, Any], request_timeout: float, token: str | None, retry_for_s: float
) -> DaemonAnswer:
    """POST the message, waiting out 429s (``Retry-After``) for at most ``retry_for_s``;
    every try carries the same msg_id, made here when none was given, so none sends twice."""
    body = {"msg_id": make_msg_id(int(time.time() * 1000))} | body
    deadline = time.monotonic() + retry_for_s
    while True:
        answer = call_daemon(url, "POST", "/swarm/send", body, request_timeout, token)
        left = deadline - time.monotonic()
        if answer.status != TOO_MANY or left <= 0:
            return answer
        wait = answer.retry_after_s if answer.retry_after_s is not None else 1.0
        if wait > left:
            return answer
        time.sleep(wait)


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
            print(f"pigeon-send: lost the daemon while waiting: {e}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        state = str(answer.body.get("state", ""))
        stage = receipt_stage(state, answer.body.get("verified_at"), answer.body.get("answered_at"))
        if answer.status == 200 and RECEIPT_STAGES.index(stage) >= RECEIPT_STAGES.index(until):
            return EXIT_ACCEPTED
        if answer.status == 200 and state in ENDED:
            reason = answer.body.get("last_error") or state
            print(f"pigeon-send: {msg_id} {state}: {reason}", file=sys.stderr)
            return EXIT_REJECTED
        if answer.status != 200:
            print(f"pigeon-send: cannot follow {msg_id}: HTTP {answer.status}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        if time.monotonic() >= deadline:
            print(f"pigeon-send: {msg_id} not {until} after {limit_s:g} s (still {stage})",
                  file=sys.stderr)  # fmt: skip
            return EXIT_UNAVAILABLE
        time.sleep(min(WAIT_POLL_S, max(deadline - time.monotonic(), 0)))


def entry() -> None:
    sys.exit(main())
