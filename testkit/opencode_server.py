"""The real ``opencode serve`` on 127.0.0.1, fully offline, for end-to-end tests.

:class:`OpencodeServer` runs one pinned opencode binary (see
:mod:`testkit.opencode_dist`) with everything isolated in a state folder::

    <state>/iso/{home,config,data,cache,state}   HOME and XDG_* (opencode's database too)
    <state>/iso/config/opencode/opencode.json    the ``fake`` provider -> our fake LLM
    <state>/projects/{dirA,dirB,...}             project directories for sessions
    <state>/opencode.log                         opencode's own log (every start appended)

Offline and isolated as testkit/opencode_isolation.py says; the constructor refuses a
state folder with an opencode config above it, since it would silently change the
configuration under test.

The test process talks to opencode with blocking ``http.client`` calls (no
reactor; testkit/opencode_http.py).  :meth:`stop` and :meth:`start` restart opencode on
the same port and state folder, so sessions survive (for outage tests).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from testkit.opencode_http import EventRecorder, OpencodeError, Response, http_request
from testkit.opencode_isolation import isolated_folders, opencode_env
from testkit.polling import PATIENCE_S

DEFAULT_PROJECTS = ("dirA", "dirB", "dirC", "dirD")
DEFAULT_START_TIMEOUT_S = PATIENCE_S
DEFAULT_STOP_TIMEOUT_S = 10.0  # then SIGKILL: a stop never fails
DEFAULT_REQUEST_TIMEOUT_S = PATIENCE_S
# one readiness probe at start; they are repeated until DEFAULT_START_TIMEOUT_S
READY_PROBE_TIMEOUT_S = 10.0
READY_PATH = "/session/status"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OpencodeServer:
    """One ``opencode serve`` process for a pinned version; see the module docstring."""

    def __init__(
        self,
        binary: Path,
        *,
        version: str,
        state_dir: Path,
        llm_base_url: str,
        projects: Sequence[str] = DEFAULT_PROJECTS,
        port: int | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        log_level: str = "INFO",
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        if not llm_base_url.startswith("http://127.0.0.1:"):
            raise ValueError(f"the fake LLM must be on 127.0.0.1, not {llm_base_url}")
        self.binary = binary
        self.version = version
        self.state_dir = state_dir.resolve()
        self.start_timeout_s = start_timeout_s
        self.request_timeout_s = request_timeout_s
        self.log_level = log_level
        self.extra_env = dict(extra_env or {})
        self.port = port if port is not None else free_port()
        self.iso = self.state_dir / "iso"
        self.project_root = self.state_dir / "projects"
        self.log_path = self.state_dir / "opencode.log"
        self.dirs = isolated_folders(self.iso, self.project_root, projects, llm_base_url)
        self._proc: subprocess.Popen[bytes] | None = None
        self._refused: socket.socket | None = None

    # -- lifecycle -------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("opencode was never started")
        return self._proc.pid

    def start(self) -> OpencodeServer:
        """Start opencode (again) and wait until it answers; OpencodeError with its log if not."""
        if self.running:
            raise RuntimeError("opencode is already running")
        if self._refused is None:
            # Bound but never listening: connecting to it is refused, and no one else can take it.
            self._refused = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._refused.bind(("127.0.0.1", 0))
        refused_port = int(self._refused.getsockname()[1])
        command = [
            str(self.binary),
            "serve",
            "--port",
            str(self.port),
            "--hostname",
            "127.0.0.1",
            "--print-logs",
            "--log-level",
            self.log_level,
        ]
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== pigeond e2e: starting {command} ===\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                command,
                cwd=self.project_root,
                env=opencode_env(self.iso, refused_port, self.extra_env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends its children too
            )
        try:
            self._wait_ready()
            self.warm_up()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        proc = self._proc
        assert proc is not None
        started = time.monotonic()
        deadline = started + self.start_timeout_s
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise OpencodeError(
                    f"opencode {self.version} exited with code {proc.returncode} at start\n"
                    + self.log_tail()
                )
            try:
                response = self.request("GET", READY_PATH, timeout_s=READY_PROBE_TIMEOUT_S)
                if response.status == 200:
                    return
                last_error = f"HTTP {response.status}"
            except (OSError, http.client.HTTPException) as exc:
                last_error = repr(exc)
            time.sleep(0.1)
        raise OpencodeError(
            f"opencode {self.version} did not answer GET {READY_PATH} on {self.url} within "
            f"{self.start_timeout_s:g} s (last: {last_error})\n" + self.log_tail()
        )

    def warm_up(self) -> None:
        """Open opencode's instance for every project directory (the first request is slow)."""
        for directory in self.dirs.values():
            self._expect(self.request("GET", READY_PATH, directory=directory), "warm up", 200)

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> int | None:
        """SIGTERM to opencode's process group, SIGKILL if it lingers; returns the exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            self._signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=timeout_s)
        # Children left behind in its group (plugin installs, LSPs) go too.
        self._signal_group(proc, signal.SIGKILL)
        return proc.returncode

    @staticmethod
    def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def close(self) -> None:
        """Stop opencode for good and release the refused port."""
        self.stop()
        if self._refused is not None:
            self._refused.close()
            self._refused = None

    def __enter__(self) -> OpencodeServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def log_tail(self, limit: int = 6000) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return f"(no log at {self.log_path})"
        return f"--- {self.log_path} (tail) ---\n{text[-limit:]}"

    def prompt_failed_inside(self, session_id: str) -> bool:
        """opencode logged that a prompt to ``session_id`` died inside it, before any model call.

        opencode 1.15.4 now and then does this to a new session's first prompt
        (``prompt_async failed`` with a ``Die`` cause, then ``session.error``).
        """
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
        return any(
            f"session.id={session_id} " in line and "prompt_async failed" in line
            for line in text.splitlines()
        )

    # -- HTTP ------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        directory: str | None = None,
        timeout_s: float | None = None,
    ) -> Response:
        """One request to opencode; ``directory`` goes in ``x-opencode-directory``."""
        return http_request(
            self.port,
            method,
            path,
            body,
            directory=directory,
            timeout_s=timeout_s or self.request_timeout_s,
        )

    def _expect(self, response: Response, what: str, *statuses: int) -> Response:
        if response.status not in statuses:
            raise OpencodeError(
                f"{what}: HTTP {response.status} {response.body[:500]!r} (opencode {self.version})"
            )
        return response

    def create_session(self, directory: str, title: str) -> str:
        """POST /session in ``directory``; returns the new session id.

        A title is required: without one opencode makes an extra (title) LLM call.
        """
        response = self.request("POST", "/session", {"title": title}, directory=directory)
        session = self._expect(response, "create session", 200).json()
        return str(session["id"])

    def get_session(self, session_id: str) -> dict[str, Any]:
        response = self.request("GET", f"/session/{session_id}")
        return cast(dict[str, Any], self._expect(response, "get session", 200).json())

    def messages(self, session_id: str, directory: str | None = None) -> list[dict[str, Any]]:
        """GET /session/<id>/message: ``[{"info": ..., "parts": [...]}, ...]``, oldest first."""
        response = self.request("GET", f"/session/{session_id}/message", directory=directory)
        return cast(list[dict[str, Any]], self._expect(response, "messages", 200).json())

    def user_texts(self, session_id: str) -> list[str]:
        """The text parts of the session's user messages, skipping synthetic parts."""
        return [
            str(part.get("text", ""))
            for message in self.messages(session_id)
            if message["info"].get("role") == "user"
            for part in message["parts"]
            if part.get("type") == "text" and not part.get("synthetic")
        ]

    def tool_parts(self, session_id: str) -> list[dict[str, Any]]:
        """The session's tool parts (``tool``, ``callID``, ``state``), oldest first."""
        return [
            part
            for message in self.messages(session_id)
            for part in message["parts"]
            if part.get("type") == "tool"
        ]

    def assistant_texts(self, session_id: str) -> list[str]:
        """The text of each assistant message (its text parts joined)."""
        return [
            "".join(str(p.get("text", "")) for p in message["parts"] if p.get("type") == "text")
            for message in self.messages(session_id)
            if message["info"].get("role") == "assistant"
        ]

    def prompt_async(
        self,
        session_id: str,
        directory: str | None,
        text: str,
        *,
        agent: str | None = None,
        model: tuple[str, str] | None = None,
        variant: str | None = None,
    ) -> int:
        """POST /session/<id>/prompt_async straight to opencode; returns the HTTP status.

        ``agent``, ``model`` (providerID, modelID) and ``variant`` are what a person
        picked in opencode's UI; left out, opencode uses its default agent and the
        session's last model (its default model in a new session), with no variant.
        """
        body: dict[str, Any] = {"parts": [{"type": "text", "text": text}]}
        if agent is not None:
            body["agent"] = agent
        if model is not None:
            body["model"] = {"providerID": model[0], "modelID": model[1]}
        if variant is not None:
            body["variant"] = variant
        response = self.request(
            "POST", f"/session/{session_id}/prompt_async", body, directory=directory
        )
        return response.status

    def abort(self, session_id: str, directory: str | None) -> int:
        """POST /session/<id>/abort (in the instance of ``directory``); returns the status."""
        response = self.request("POST", f"/session/{session_id}/abort", {}, directory=directory)
        return response.status

    def status(self, directory: str | None) -> dict[str, Any]:
        """GET /session/status: ``{session_id: {"type": "busy" | "retry", ...}}``, idle absent."""
        response = self.request("GET", "/session/status", directory=directory)
        return cast(dict[str, Any], self._expect(response, "session status", 200).json())

    def wait_idle(
        self,
        session_id: str,
        directory: str | Iterable[str],
        timeout_s: float,
        *,
        settle_s: float = 0.3,
        poll_s: float = 0.05,
    ) -> float:
        """Wait until the session is absent from GET /session/status for every directory.

        The status is per directory instance, so pass every directory header a
        session was prompted with.  Idle must hold for ``settle_s`` in a row (a
        prompt_async's turn starts just after its 204).  Returns the seconds
        waited; OpencodeError after ``timeout_s``.
        """
        dirs = [directory] if isinstance(directory, str) else list(directory)
        started = time.monotonic()
        deadline = started + timeout_s
        idle_since: float | None = None
        busy: dict[str, Any] = {}
        while True:
            now = time.monotonic()
            busy = {d: s[session_id] for d in dirs if session_id in (s := self.status(d))}
            if busy:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= settle_s:
                return now - started
            if now >= deadline:
                raise OpencodeError(
                    f"session {session_id} still busy after {timeout_s:g} s: {busy} "
                    f"(opencode {self.version})"
                )
            time.sleep(poll_s)

    @contextlib.contextmanager
    def record_events(
        self, path: str = "/global/event", directory: str | None = None
    ) -> Iterator[EventRecorder]:
        """Record the SSE events of ``path`` while the block runs."""
        recorder = EventRecorder(self.port, path, directory)
        recorder.start()
        try:
            yield recorder
        finally:
            recorder.close()
