"""What the ``pigeon`` verbs that go through the daemon share: ``--url`` and
``--timeout``, the token, the request, and the one-line error and exit code for each way
it can go wrong (bad usage 2, refused 1, unreachable or failing daemon 3).

``name set|release`` and ``channel join|leave`` write through the daemon because only
it can ask opencode whether a session exists; this is their one way of asking it.
``permission answer`` and the TUI answer a permission request through it too
(:func:`answer_through_daemon`, the TUI's way, says what came of it in one line).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any, Final

from pigeond.cli import daemon_http
from pigeond.credentials import SYSTEM_SOCKET, TokenError, client_token, daemon_address
from pigeond.terminal import visible

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
DEFAULT_TIMEOUT_S: Final = 10.0

# One request: method, path, JSON body (None: none).
Request = tuple[str, str, dict[str, Any] | None]


def add_daemon_options(verb: argparse.ArgumentParser) -> None:
    verb.add_argument("--url", help=daemon_http.URL_HELP)
    verb.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
        help=f"seconds to wait for the daemon's answer (default {DEFAULT_TIMEOUT_S:g})",
    )  # fmt: skip
    # where the system service's socket is: only a test puts it elsewhere
    verb.set_defaults(system_socket=SYSTEM_SOCKET)


def fail(message: str, status: int) -> int:
    """Say ``message`` on one line (escaped) and return ``status``."""
    print(f"pigeon: {visible(message)}", file=sys.stderr)
    return status


def ask_daemon(
    args: argparse.Namespace, env: Mapping[str, str], what: str, request: Request
) -> Mapping[str, Any] | int:
    """The daemon's answer to ``request`` when it is a 2xx; otherwise the exit code, the
    error said on one line (``what`` names the verb)."""
    if args.timeout <= 0:
        return fail("--timeout must be positive", EXIT_USAGE)
    address = daemon_address(args.url, env, system_socket=args.system_socket)
    try:
        token = client_token(env)
    except TokenError as e:
        return fail(str(e), EXIT_USAGE)
    try:
        answer = daemon_http.call_daemon(address.url, *request, args.timeout, token)
    except daemon_http.UsageError as e:
        return fail(str(e), EXIT_USAGE)
    except (OSError, TimeoutError) as e:
        return fail(daemon_http.unreachable_line(address, e, args.system_socket), EXIT_UNAVAILABLE)
    if not 200 <= answer.status < 300:
        status = EXIT_REFUSED if 400 <= answer.status < 500 else EXIT_UNAVAILABLE
        turned_away = daemon_http.turned_away_line(address, answer, args.system_socket)
        plain = f"{what}: daemon answered {answer.status}: {answer.error}"
        return fail(turned_away or plain, status)
    return answer.body


def permission_reply(request_id: str, answer: str) -> Request:
    """The request that answers permission request ``request_id`` (only the daemon can
    reach opencode, in the instance that holds the request)."""
    return ("POST", f"/swarm/permissions/{request_id}/reply", {"answer": answer})


def answer_through_daemon(
    url: str, token: str | None, request_id: str, answer: str, timeout_s: float = DEFAULT_TIMEOUT_S
) -> str:
    """Answer through the daemon at ``url`` (the TUI's way); the line saying what came of it."""
    request = permission_reply(request_id, answer)
    try:
        reply = daemon_http.call_daemon(url, *request, timeout_s, token)
    except (OSError, TimeoutError, ValueError) as e:
        return f"{request_id}: the daemon cannot be reached ({e}); nothing answered"
    if 200 <= reply.status < 300:
        return f"{request_id}: answered {answer}"
    return f"{request_id}: not answered: {reply.error}"
