"""The real Claude Code's interactive session (its TUI) under tmux, offline: what channels
need, which ``claude -p`` never delivers.

Measured with Claude Code 2.1.332 (see /work/shared/agents/README.md, "Channels"):

* the channels feature is behind a flag read from ``~/.claude.json``
  (``cachedGrowthBookFeatures.tengu_harbor``), which is ignored while the privacy
  variables of :data:`tests.claude_code.PRIVACY_VARIABLES` are set; so they are left out,
  and what Claude Code would fetch on its own goes to :class:`DeadEndProxy` instead;
* :func:`seed_config` spares the session every first-run dialog (onboarding, the API
  key's approval, the folder's trust);
* ``--dangerously-load-development-channels`` asks once for consent: :meth:`ClaudeTui.accept`
  answers it;
* ``--debug-file`` is Claude Code's own account of what it did (hooks run, MCP servers
  connected, channel notifications registered and received): the tests wait on it.

Each :class:`ClaudeTui` runs its own tmux server on a private socket, killed by
:meth:`ClaudeTui.close` (no leftover process, whatever the test did).
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from testkit.polling import PATIENCE_S, Budget, wait_until
from tests.claude_code import API_KEY, PRIVACY_VARIABLES, ClaudeCode

TMUX_TIMEOUT_S = 30.0
COLUMNS, ROWS = 200, 50
CONSENT = "I am using this for local development"
ENTER_AGAIN_S = 1.0  # how long the consent prompt is given to go after an Enter


class _Refuse(BaseHTTPRequestHandler):
    """403 to everything, ``CONNECT`` included: nothing gets through."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _refuse(self) -> None:
        self.server.asked.append(self.requestline)  # type: ignore[attr-defined]
        self.send_response(403)
        self.send_header("content-length", "0")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    do_CONNECT = do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _refuse


class DeadEndProxy:
    """An HTTP(S) proxy on 127.0.0.1 that refuses every request (and records it): where
    Claude Code's own traffic (update checks, registries, telemetry) ends."""

    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuse)
        self._server.daemon_threads = True
        self._server.asked = []  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> DeadEndProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def asked(self) -> list[str]:
        """The request lines refused so far (``CONNECT host:443 HTTP/1.1`` ...)."""
        return list(self._server.asked)  # type: ignore[attr-defined]


def tui_env(
    claude: ClaudeCode, proxy: DeadEndProxy, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Claude Code's environment (:func:`tests.claude_code.claude_env`) for a session with
    channels: no privacy variables, everything but 127.0.0.1 sent to ``proxy``."""
    env = {k: v for k, v in claude.env(extra).items() if k not in PRIVACY_VARIABLES}
    return env | {
        "HTTPS_PROXY": proxy.url,
        "HTTP_PROXY": proxy.url,
        "NO_PROXY": "127.0.0.1",
        "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
        "GIT_SSH_COMMAND": "false",
        "TERM": "xterm-256color",
    }


def seed_config(home: Path, project: Path) -> None:
    """``~/.claude.json`` as after a first run in ``project``, with the channels flag on."""
    config = {
        "cachedGrowthBookFeatures": {"tengu_harbor": True},
        "hasCompletedOnboarding": True,
        "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
        "projects": {str(project): {"hasTrustDialogAccepted": True}},
    }
    (home / ".claude.json").write_text(json.dumps(config), encoding="utf-8")


class ClaudeTui:
    """``claude ARGS`` in ``project``, interactive, in a tmux server of its own; its debug
    log in ``<socket folder>/claude-debug.log``."""

    def __init__(
        self,
        claude: ClaudeCode,
        project: Path,
        env: Mapping[str, str],
        args: Sequence[str],
        folder: Path,
    ) -> None:
        self.socket = folder / "tmux.sock"
        self.debug_log = folder / "claude-debug.log"
        command = [str(claude.binary), *args, "--debug-file", str(self.debug_log)]
        assignments = [f"{k}={v}" for k, v in env.items()]
        self._tmux(
            "new-session", "-d", "-x", str(COLUMNS), "-y", str(ROWS), "-c", str(project),
            "env", "-i", *assignments, *command,
        )  # fmt: skip

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", str(self.socket), "-f", "/dev/null", *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TMUX_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, (args[:1], done.stderr)
        return done.stdout

    def screen(self) -> str:
        """What the terminal shows now."""
        return self._tmux("capture-pane", "-p")

    def debug(self) -> str:
        """Claude Code's debug log so far."""
        try:
            return self.debug_log.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def accept(self, timeout_s: float = PATIENCE_S) -> None:
        """Answer the development channels' consent prompt (its first choice, selected).
        The prompt may be drawn before it reads keys, so Enter is sent again while it
        stays on screen (an Enter on the empty prompt after it does nothing)."""
        budget = Budget(timeout_s)
        wait_until(lambda: CONSENT in self.screen(), budget.left(), "the channels' consent prompt")

        def answered() -> bool:
            if CONSENT not in self.screen():
                return True
            self._tmux("send-keys", "Enter")
            return False

        wait_until(answered, budget.left(), "the consent accepted", every_s=ENTER_AGAIN_S)

    def wait_logged(self, text: str, what: str, timeout_s: float = PATIENCE_S) -> str:
        """Until Claude Code's debug log has a line with ``text``; that line."""

        def line() -> str | None:
            return next((x for x in self.debug().splitlines() if text in x), None)

        return wait_until(line, timeout_s, what, every_s=0.05)

    def close(self) -> None:
        """Kill the tmux server, and with it the session and what it started."""
        subprocess.run(
            ["tmux", "-S", str(self.socket), "kill-server"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=TMUX_TIMEOUT_S,
            check=False,
        )
