"""Run a tool of pigeond's opencode plugin in opencode's own runtime, without opencode.

The opencode binary is a compiled Bun program; with ``BUN_BE_BUN=1`` it acts
as the ``bun`` it was built with, so :file:`plugin_driver.mjs` runs the plugin
under the same JavaScript runtime (``fetch``, ``crypto``, ``AbortSignal``)
opencode gives it.  The daemon is either stubbed (``replies``: its answers in
order) or real (``replies=None`` and ``PIGEOND_URL`` in ``env``).

The tool sees only ``env`` (over a closed ``PIGEOND_URL``, no retries and a
``HOME`` that does not exist): no token or socket of the machine's own pigeond.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.opencode_dist import OPENCODE_1_18, OpencodeInstallError, ensure_opencode

REPO = Path(__file__).resolve().parent.parent
PLUGIN = REPO / "packaging" / "opencode-plugin" / "pigeond-swarm.js"
DRIVER = Path(__file__).resolve().parent / "plugin_driver.mjs"
SESSION = "ses_callerAAAA"
RUN_TIMEOUT_S = 60.0
# A closed port: a test that forgets to stub the daemon fails, it never reaches one.
CLOSED_URL = "http://127.0.0.1:9"


def accepted(msg_id: str = "msg_x") -> dict[str, Any]:
    """The daemon's 202 to a send."""
    return {"status": 202, "body": {"accepted": True, "msg_id": msg_id}}


def refused_connection() -> dict[str, Any]:
    return {"error": "ConnectionRefused"}


def rate_limited(retry_after_s: int | None, error: str = "too many messages") -> dict[str, Any]:
    """The daemon's flood guard: 429, with ``Retry-After`` when given."""
    headers = {} if retry_after_s is None else {"Retry-After": str(retry_after_s)}
    return {"status": 429, "body": {"error": error}, "headers": headers}


@dataclass(frozen=True, slots=True)
class ToolRun:
    """What one run of the driver printed."""

    exports: list[str]
    hooks: list[str]
    tools: dict[str, dict[str, Any]]
    requests: list[dict[str, Any]]
    ok: bool | None = None
    output: str | None = None
    error: str | None = None
    env: dict[str, str] | None = None

    @property
    def posts(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == "POST"]


def bun() -> Path:
    try:
        return ensure_opencode(OPENCODE_1_18)
    except OpencodeInstallError as exc:  # never skip: the plugin's tests are part of the suite
        raise AssertionError(f"cannot install opencode {OPENCODE_1_18}: {exc}") from exc


def driver_input(
    tool: str | None,
    args: object,
    *,
    replies: Sequence[Mapping[str, Any]] | None,
    env: Mapping[str, str | None] | None,
    session: str | None,
    call_id: str | None,
    plugin: Path,
) -> dict[str, Any]:
    """What a plugin driver reads on stdin: one tool call, its environment and the daemon."""
    return {
        "plugin": str(plugin),
        "tool": tool,
        "args": {} if args is None else args,
        "context": {"sessionID": session, "callID": call_id, "directory": str(REPO)},
        "env": {
            "PIGEOND_URL": CLOSED_URL,
            "PIGEOND_SEND_RETRY_S": "0",
            "HOME": "/nonexistent/pigeond-plugin-test",
            **(env or {}),
        },
        "replies": None if replies is None else list(replies) or [refused_connection()],
    }


def run_driver(
    command: Sequence[str], request: Mapping[str, Any], env: Mapping[str, str]
) -> dict[str, Any]:
    """Run a plugin driver with ``request`` on stdin; what it printed, as JSON."""
    done = subprocess.run(
        command,
        input=json.dumps(request).encode(),
        capture_output=True,
        timeout=RUN_TIMEOUT_S,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", **env},
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"the driver failed ({done.returncode}): {done.stderr.decode()}")
    raw: dict[str, Any] = json.loads(done.stdout)
    return raw


def run_tool(
    tool: str | None,
    args: object = None,
    *,
    replies: Sequence[Mapping[str, Any]] | None = (),
    env: Mapping[str, str | None] | None = None,
    session: str | None = SESSION,
    call_id: str | None = "call_1",
    plugin: Path = PLUGIN,
    shell_env: Mapping[str, Any] | None = None,
) -> ToolRun:
    """Run ``tool`` with ``args`` as opencode would, for a call ``call_id`` of ``session``;
    ``env`` adds to (or, with None, removes from) the tool's environment."""
    request = driver_input(tool, args, replies=replies, env=env, session=session,
                           call_id=call_id, plugin=plugin)  # fmt: skip
    request["shell_env"] = None if shell_env is None else dict(shell_env)
    raw = run_driver([str(bun()), "run", str(DRIVER)], request, {"BUN_BE_BUN": "1"})
    return ToolRun(
        exports=raw["exports"],
        hooks=raw["hooks"],
        tools=raw["tools"],
        requests=raw["requests"],
        ok=raw.get("ok"),
        output=raw.get("output"),
        error=raw.get("error"),
        env=raw.get("env"),
    )


def inbox_message(n: int, payload: str, **fields: Any) -> dict[str, Any]:
    """Message ``n`` of an inbox page the daemon answers a tool, ``fields`` changed."""
    return {
        "msg_id": f"msg_m{n}",
        "from": "ses_senderCCCC",
        "to": SESSION,
        "channel": None,
        "kind": "chat",
        "priority": "normal",
        "reply_to": None,
        "payload": payload,
        "created_at": 1796215498693,
        "handed_off_at": 1796215498733,
        "verified_at": None,
    } | fields
