"""The two calls pigeond makes to ``opencode serve``, each under one deadline.

The deadline covers the whole exchange (connect, headers and body): a server
that accepts the connection and then hangs must not hold a target's delivery
slot forever.
"""

from __future__ import annotations

import json
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from treq.client import HTTPClient
from twisted.internet.defer import CancelledError, Deferred, TimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

T = TypeVar("T")

_MAX_ERROR_TEXT = 300


class OpencodeError(Exception):
    """A call to opencode did not succeed; the text is what operators see in ``last_error``."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class SessionNotFound(OpencodeError):
    """opencode answered 404 for the session: it does not exist (anymore)."""


@dataclass(frozen=True, slots=True)
class BasicAuth:
    username: str
    password: str


def _short(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip().replace("\n", " ")
    return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT] + "…"


def _describe(error: Exception) -> str:
    """One readable line for a transport error (ResponseFailed wraps its real reasons)."""
    reasons = getattr(error, "reasons", None)
    if isinstance(reasons, list) and reasons:
        inner = "; ".join(
            f"{type(r.value).__name__}: {r.getErrorMessage()}" if isinstance(r, Failure) else str(r)
            for r in reasons
        )
        return f"{type(error).__name__} ({inner})"
    return f"{type(error).__name__}: {error}"


class OpencodeClient:
    def __init__(
        self,
        http: HTTPClient,
        base_url: str,
        clock: IReactorTime,
        *,
        timeout_s: float = 30.0,
        auth: BasicAuth | None = None,
    ) -> None:
        self._http = http
        self._base = base_url.rstrip("/")
        self._clock = clock
        self._timeout_s = timeout_s
        self._auth = auth

    @property
    def base_url(self) -> str:
        return self._base

    async def _exchange(
        self, method: str, path: str, headers: dict[str, str], body: Any | None
    ) -> tuple[int, bytes]:
        kwargs: dict[str, Any] = {"headers": headers, "allow_redirects": False}
        if body is not None:
            kwargs["data"] = json.dumps(body).encode("utf-8")
            headers["content-type"] = "application/json"
        if self._auth is not None:
            kwargs["auth"] = (self._auth.username, self._auth.password)
        response = await self._http.request(method, self._base + path, **kwargs)
        content = await response.content()
        return int(response.code), content

    async def _with_deadline(self, what: str, work: Coroutine[Any, Any, T]) -> T:
        timed_out = False

        def on_timeout(result: object, timeout: float) -> object:
            nonlocal timed_out
            timed_out = True
            return result

        d: Deferred[T] = Deferred.fromCoroutine(work)
        d.addTimeout(self._timeout_s, self._clock, onTimeoutCancel=on_timeout)
        try:
            return await d
        except OpencodeError:
            raise
        except Exception as e:
            if timed_out or isinstance(e, TimeoutError | CancelledError):
                raise OpencodeError(
                    f"{what}: no complete answer within {self._timeout_s:g} s"
                ) from e
            raise OpencodeError(f"{what}: {_describe(e)}") from e

    async def session_directory(self, session_id: str) -> str:
        """The directory opencode stored for the session (``GET /session/<id>``)."""
        what = f"GET /session/{session_id}"
        status, body = await self._with_deadline(
            what,
            self._exchange("GET", f"/session/{session_id}", {"accept": "application/json"}, None),
        )
        if status == 404:
            raise SessionNotFound(f"{what}: session not found", status)
        if not 200 <= status < 300:
            raise OpencodeError(f"{what}: HTTP {status}: {_short(body)}", status)
        try:
            directory = json.loads(body)["directory"]
        except (ValueError, KeyError, TypeError) as e:
            raise OpencodeError(f"{what}: answer has no 'directory': {_short(body)}") from e
        if not isinstance(directory, str) or not directory or not directory.isprintable():
            raise OpencodeError(f"{what}: unusable directory {directory!r}")
        return directory

    async def prompt_async(self, session_id: str, directory: str, text: str) -> None:
        """Hand one prompt to the session; returns once opencode accepted it (2xx)."""
        what = f"POST /session/{session_id}/prompt_async"
        body = {"parts": [{"type": "text", "text": text}]}
        headers = {"x-opencode-directory": directory, "accept": "application/json"}
        status, answer = await self._with_deadline(
            what, self._exchange("POST", f"/session/{session_id}/prompt_async", headers, body)
        )
        if status == 404:
            raise SessionNotFound(f"{what}: HTTP 404: {_short(answer)}", status)
        if not 200 <= status < 300:
            raise OpencodeError(f"{what}: HTTP {status}: {_short(answer)}", status)
