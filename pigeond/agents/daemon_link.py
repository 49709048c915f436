"""How pigeon-mcp reaches pigeond: the address and token as every client finds them
(:func:`pigeond.credentials.daemon_address`, :func:`~pigeond.credentials.client_token`),
one blocking stdlib request at a time (:func:`pigeond.cli.daemon_http.call_daemon`, run
in a worker thread by the server), retried as the opencode plugin retries.

A daemon that does not answer is retried for a few seconds only, then a
:class:`ToolError` says so: an agent's tool call never hangs on a daemon that is down.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pigeond.agents.escaping import cut_to_bytes, field
from pigeond.cli.daemon_http import DaemonAnswer, UsageError, call_daemon, socket_refusal
from pigeond.credentials import SYSTEM_SOCKET, TokenError, client_token, daemon_address

REQUEST_TIMEOUT_S: Final = 5.0
READ_RETRY_S: Final = 3.0
# swarm_send's retry budget (PIGEOND_SEND_RETRY_S): a few seconds here, not the plugin's
# 30, because an MCP client waits on the tool call with its own timeout
DEFAULT_SEND_RETRY_S: Final = 3.0
MAX_SEND_RETRY_S: Final = 600.0


class ToolError(Exception):
    """What the agent reads as the tool's error: one sentence naming the tool."""


class Unreachable(ToolError):
    """No answer, or a 5xx, after the retries."""


class RateLimited(ToolError):
    """A 429 from pigeond's flood guard; ``retry_after_s`` is its Retry-After, if any."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def why_no_answer(url: str, error: OSError, timeout_s: float) -> str:
    """A few words on why a request got no answer, as the plugin words them."""
    if isinstance(error, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, FileNotFoundError):
        return "no socket there"
    if isinstance(error, PermissionError) and url.startswith("unix:"):
        return socket_refusal(url[len("unix:") :])
    return error.strerror or str(error) or type(error).__name__


@dataclass(frozen=True, slots=True)
class Daemon:
    """Where the tools reach pigeond, read from the environment once per tool call."""

    env: Mapping[str, str]
    url: str
    send_retry_s: float
    system_socket: str = SYSTEM_SOCKET
    sleep: Callable[[float], None] = time.sleep

    @classmethod
    def from_env(
        cls, tool: str, env: Mapping[str, str], system_socket: str = SYSTEM_SOCKET
    ) -> Daemon:
        raw = env.get("PIGEOND_SEND_RETRY_S", "").strip()
        try:
            retry = DEFAULT_SEND_RETRY_S if raw == "" else float(raw)
        except ValueError:
            retry = -1.0
        if not 0 <= retry <= MAX_SEND_RETRY_S:
            raise ToolError(
                f"{tool}: PIGEOND_SEND_RETRY_S must be a number of seconds from 0 to"
                f" {MAX_SEND_RETRY_S:g}, not {field(raw)!r}"
            )
        address = daemon_address(None, env, system_socket=system_socket)
        return cls(env, address.url, retry, system_socket)

    def once(
        self, tool: str, method: str, path: str, body: dict[str, Any] | None, timeout_s: float
    ) -> DaemonAnswer:
        """One request: the answer, or Unreachable (no answer, or a 5xx) or RateLimited."""
        try:
            token = client_token(self.env)
        except TokenError as e:
            raise ToolError(f"{tool}: {e}") from e
        try:
            answer = call_daemon(self.url, method, path, body, timeout_s, token)
        except UsageError as e:
            raise ToolError(f"{tool}: PIGEOND_URL: {e}") from e
        except OSError as e:  # TimeoutError is one
            raise Unreachable(why_no_answer(self.url, e, timeout_s)) from e
        if answer.status >= 500:
            error = answer.body.get("error") or "server error"
            raise Unreachable(f"HTTP {answer.status}: {error}")
        if answer.status == 429:
            error = cut_to_bytes(str(answer.body.get("error") or "too many requests"), 300)
            raise RateLimited(error, answer.retry_after_s)
        return answer

    def call(
        self,
        tool: str,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        budget_s: float = READ_RETRY_S,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> DaemonAnswer:
        """The request, retried while the daemon is unreachable (0.25 s doubling to 4 s)
        or rate-limiting (after its Retry-After) until ``budget_s`` has passed; then the
        last error, saying how long it tried."""
        started = time.monotonic()
        delay = 0.25
        tries = 0
        while True:
            tries += 1
            try:
                return self.once(tool, method, path, body, timeout_s)
            except (Unreachable, RateLimited) as error:
                waited = time.monotonic() - started
                left = budget_s - waited
                if left <= 0:
                    effort = f"{tries} {'try' if tries == 1 else 'tries'} over {waited:.1f} s"
                    raise self._spent(error, effort) from error
                if isinstance(error, RateLimited) and error.retry_after_s is not None:
                    self.sleep(min(max(error.retry_after_s, 0.1), left))
                else:
                    self.sleep(min(delay, left))
                    delay = min(delay * 2, 4.0)

    def _spent(self, error: ToolError, effort: str) -> ToolError:
        if isinstance(error, RateLimited):
            ask = (
                ""
                if error.retry_after_s is None
                else f"; it asked to wait {error.retry_after_s:g} s"
            )
            return RateLimited(
                f"pigeond is rate-limiting (HTTP 429: {json.dumps(str(error))}{ask}; {effort})",
                error.retry_after_s,
            )
        return Unreachable(f"pigeond is unreachable at {self.url} ({error}; {effort})")


def refused(
    tool: str, answer: DaemonAnswer, doing: str | None = None, max_bytes: int = 500
) -> ToolError:
    """A 4xx the tool does not explain itself: the daemon's own error, escaped and cut to
    ``max_bytes``; ``doing`` names which of the tool's steps was refused."""
    why = answer.body.get("error") or answer.body
    where = tool if doing is None else f"{tool}: {doing}"
    return ToolError(f"{where}: pigeond refused it (HTTP {answer.status}): {field(why, max_bytes)}")
