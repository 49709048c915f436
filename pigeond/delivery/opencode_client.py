"""The calls pigeond makes to ``opencode serve``, each under one deadline.

The deadline covers the whole exchange, and every failure is classified, because the
arbiter treats them differently (:mod:`pigeond.delivery.opencode_deadline`); every call
tells :mod:`pigeond.delivery.reachability` whether opencode answered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import treq
from treq.client import HTTPClient
from twisted.internet.interfaces import IReactorTime
from twisted.web.http_headers import Headers
from twisted.web.iweb import IResponse

from pigeond.config import Config
from pigeond.credentials import BasicAuth
from pigeond.delivery.api_support import (
    HEALTH_PATH,
    PROBE_PATH,
    ApiSupport,
    is_html,
    missing_route,
    missing_v2_route,
)
from pigeond.delivery.failures import FailureKind
from pigeond.delivery.http_exchange import HttpExchange
from pigeond.delivery.opencode_deadline import within_deadline
from pigeond.delivery.opencode_errors import (
    CLOSED_BEFORE_ANSWER,
    CONNECTION_GONE,
    OUTAGE_STATUSES,
    DeadlineExceeded,
    OpencodeError,
    SessionNotFound,
    SpeaksV2,
    UnsupportedApi,
    describe_transport_error,
    short_text,
    status_error,
    status_text,
    was_cancelled,
)
from pigeond.delivery.reachability import OpencodeReachability, Reach
from pigeond.delivery.transcript_reads import TranscriptReadWatch

# the errors are declared in opencode_errors; every caller imports them from here
__all__ = [
    "DeadlineExceeded", "FailureKind", "OpencodeClient", "OpencodeError", "SessionNotFound",
    "SpeaksV2", "UnsupportedApi",
]  # fmt: skip


class OpencodeClient:
    def __init__(
        self,
        http: HTTPClient,
        base_url: str,
        clock: IReactorTime,
        config: Config,
        *,
        auth: BasicAuth | None = None,
        exchange: HttpExchange | None = None,
        transcript_reads: TranscriptReadWatch | None = None,
    ) -> None:
        """``config`` gives ``handoff_timeout_s``, each call's deadline (see :meth:`configure`).
        ``exchange``, when given, makes every call but the event stream (which stays on
        ``http``): the daemon passes one for an ``http://`` opencode, as it costs a third
        of what treq does per call (see :mod:`pigeond.delivery.http_exchange`).
        ``transcript_reads`` is told each transcript read that passes the deadline, and each
        that does not (one shared with the other runtimes' reads; else one of its own)."""
        self._http = http
        self._base = base_url.rstrip("/")
        self._clock = clock
        self.transcript_reads = transcript_reads or TranscriptReadWatch(clock)
        self.configure(config)
        self._auth = auth
        self._lean = exchange
        # whether opencode answers, told by every call; it probes through an outage
        self.reachability = OpencodeReachability(self._base, clock, self._probe_reachable)
        # is v1 there (GET /session/status), or a 2.x (GET /api/health): see api_support
        self.api = ApiSupport(self._base, partial(self._probe, PROBE_PATH),
                              partial(self._probe, HEALTH_PATH))  # fmt: skip

    def configure(self, config: Config) -> None:
        """A reload's deadline, for the calls (and the other runtimes' transcript reads)
        made from now on."""
        self.timeout_s = config.handoff_timeout_s
        self.transcript_reads.deadline_s = config.handoff_timeout_s

    @property
    def base_url(self) -> str:
        return self._base

    @property
    def reachable(self) -> bool | None:
        """What the calls showed: True (answered), False (an outage), None (none made)."""
        return {Reach.OK: True, Reach.UNREACHABLE: False, Reach.NOT_CONTACTED: None}[
            self.reachability.state
        ]

    async def open_event_stream(self) -> IResponse:
        """``GET /global/event`` with no deadline and the body not read: the stream's 200
        response, for its reader to take the body as it comes (``deliverBody``).  Any
        other answer is read and raised as a ConnectionError."""
        what = "GET /global/event"
        self._refuse_on_v2(what)
        response = await self._open_stream("/global/event")
        if response.code != 200 or _is_page(response):
            await self._refuse_missing_route(int(response.code), await treq.content(response))
            raise ConnectionError(f"{what} answered HTTP {response.code}")
        self.api.saw_v1()
        return response

    async def open_v2_event_stream(self) -> IResponse:
        """``GET /api/event``, a 2.x's stream, as :meth:`open_event_stream` opens the 1.x
        one (with the password); asked only while opencode is found to be a 2.x (a 1.x is
        never asked anything under ``/api/``).  A route found missing makes the verdict
        again; any other answer than the stream is raised as a ConnectionError."""
        what = "GET /api/event"
        if self.api.v2_version is None:
            raise ConnectionError(f"{what}: opencode at {self._base} is not found to be a 2.x")
        response = await self._open_stream("/api/event")
        if response.code != 200 or _is_page(response):
            body = await treq.content(response)
            if missing_v2_route(int(response.code), body):
                await self.api.verdict()
            raise ConnectionError(f"{what} answered HTTP {response.code}: {short_text(body)}")
        return response

    async def _open_stream(self, path: str) -> IResponse:
        """An event stream's response, its body not read, told to reachability."""
        what = f"GET {path}"
        try:
            response: IResponse = await self._http.request(
                "GET", self._base + path, unbuffered=True,
                headers=Headers({b"accept": [b"text/event-stream"]}), **self.request_options(),
            )  # fmt: skip
        except CONNECTION_GONE as e:
            # (closed before an answer is not told: treq may have handed the stream a kept
            # connection that had gone stale; the stream's next try says what is true)
            self.reachability.failed(f"{what}: {describe_transport_error(e)}")
            raise
        self._note_answer(what, int(response.code))
        return response

    def request_options(self) -> dict[str, Any]:
        """Keyword arguments every request to opencode carries (auth, no redirects)."""
        options: dict[str, Any] = {"allow_redirects": False}
        if self._auth is not None:
            options["auth"] = (self._auth.username, self._auth.password)
        return options

    def close(self) -> None:
        """At shutdown: stop probing, and close the kept-alive connections of ``exchange``
        (treq's pool is the daemon's to close)."""
        self.reachability.stop()
        if self._lean is not None:
            self._lean.close()

    async def _exchange(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        data: bytes | None,
        fresh: bool = False,
    ) -> tuple[int, bytes]:
        if self._lean is not None:
            return await self._lean.request(method, path, headers, data, fresh=fresh)
        kwargs = self.request_options() | {"headers": headers}
        if data is not None:
            kwargs["data"] = data
        response = await self._http.request(method, self._base + path, **kwargs)
        content = await treq.content(response)
        return int(response.code), content

    def _note_answer(self, what: str, status: int) -> None:
        """An answer came: opencode is there, unless the status says it is not (a proxy's
        502-504 without it behind, or credentials it refuses)."""
        if status in OUTAGE_STATUSES:
            self.reachability.failed(status_text(what, status))
        else:
            self.reachability.answered()

    def _note_failure(self, error: OpencodeError) -> None:
        """A call that got no answer: no connection could be made, or it was closed before
        any answer (never our own deadline or cancel: opencode may be slow, not gone)."""
        cause = error.__cause__
        if isinstance(cause, CONNECTION_GONE + CLOSED_BEFORE_ANSWER) and not was_cancelled(cause):
            self.reachability.failed(str(error))

    async def _probe_reachable(self) -> None:
        """One question to an unreachable opencode: ``GET /session/status``, the route turns
        are polled with.  Its outcome reaches :attr:`reachability` as every call's does."""
        await self._probe(PROBE_PATH)  # told to reachability; the next follows its backoff

    def _refuse_on_v2(self, what: str) -> None:
        """A 1.x call to an opencode found to be 2.x is not made: SpeaksV2 (a 2.x is
        asked nothing but its own routes, and the 1.x watchers stay quiet)."""
        if self.api.v2_version is not None:
            raise SpeaksV2(f"{what}: opencode at {self._base} is {self.api.v2_version} (2.x)")

    async def exchange_bytes(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None,
        deadline_s: float | None,
    ) -> tuple[int, bytes]:  # fmt: skip
        """One call of a 2.x route (:mod:`pigeond.delivery.opencode_dialect`): as every
        call, under the deadline (``deadline_s``, else ``handoff_timeout_s``), with the
        configured password, told to reachability."""
        return await self._call(f"{method} {path.partition('?')[0]}", method, path, headers,
                                data=body, v1=False, deadline_s=deadline_s)  # fmt: skip

    async def _call(
        self, what: str, method: str, path: str, headers: dict[str, str], body: Any = None, *,
        data: bytes | None = None, v1: bool = True, deadline_s: float | None = None,
    ) -> tuple[int, bytes]:  # fmt: skip
        """One exchange under the deadline; a connection closed before any answer is
        tried once more on a fresh connection (a pooled one may have gone stale).  A v1
        call (``v1``: not a probe) is not made to an opencode found to be 2.x."""
        if v1:
            self._refuse_on_v2(what)
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["content-type"] = "application/json"
        # A read that gets no answer delivered nothing: opencode is not serving
        # (e.g. still starting).  A prompt that gets no answer may have been taken.
        on_timeout = FailureKind.OUTAGE if method == "GET" else FailureKind.ATTEMPT
        timeout_s = self.timeout_s if deadline_s is None else deadline_s
        try:
            status, content = await within_deadline(
                what, self._exchange(method, path, headers, data), self._clock, timeout_s,
                on_timeout,
            )  # fmt: skip
        except DeadlineExceeded:
            raise
        except OpencodeError as e:
            closed = isinstance(e.__cause__, CLOSED_BEFORE_ANSWER)
            if not (closed and e.kind is FailureKind.OUTAGE) or was_cancelled(e.__cause__):
                self._note_failure(e)
                raise
            try:
                status, content = await within_deadline(
                    what, self._exchange(method, path, headers, data, fresh=True),
                    self._clock, timeout_s, on_timeout,
                )  # fmt: skip
            except OpencodeError as again:
                self._note_failure(again)
                raise
        self._note_answer(what, status)
        return status, content

    async def _get_json(
        self, path: str, directory: str | None = None, *, names_session: bool = True
    ) -> Any:
        """GET a JSON answer; a 404 on a path that names a session is SessionNotFound."""
        what = "GET " + path.split("?")[0]
        headers = {"accept": "application/json"}
        if directory is not None:
            headers["x-opencode-directory"] = directory
        status, body = await self._call(what, "GET", path, headers)
        await self._refuse_missing_route(status, body)
        if status == 404 and names_session:
            raise SessionNotFound(f"{what}: session not found")
        if not 200 <= status < 300:
            raise status_error(what, status, body)
        try:
            answer = json.loads(body)
        except ValueError as e:
            raise OpencodeError(f"{what}: not JSON: {short_text(body)}") from e
        self.api.saw_v1()
        return answer

    async def _probe(self, path: str) -> tuple[int, bytes] | None:
        """``GET path`` to recognise the API (``/session/status``, a v1 route every 1.x
        answers with a JSON object; ``/api/health``); None when it got no answer."""
        try:
            return await self._call("GET " + path, "GET", path, {"accept": "application/json"},
                                    v1=False)  # fmt: skip
        except OpencodeError:
            return None

    async def _refuse_missing_route(self, status: int, body: bytes) -> None:
        """An answer as if the v1 route were not there: UnsupportedApi once a probe
        finds v1 gone (else the answer is judged as usual)."""
        if missing_route(status, body):
            problem = await self.api.verdict()
            if problem is not None:
                raise UnsupportedApi(problem)
            self._refuse_on_v2("a 1.x route")

    async def session_directory(self, session_id: str) -> str:
        """The directory opencode stored for the session (``GET /session/<id>``)."""
        answer = await self._get_json(f"/session/{session_id}")
        directory = answer.get("directory") if isinstance(answer, dict) else None
        if not isinstance(directory, str) or not directory or not directory.isprintable():
            raise OpencodeError(f"GET /session/{session_id}: unusable directory {directory!r}")
        return directory

    async def prompt_async(
        self,
        session_id: str,
        directory: str,
        texts: Sequence[str],
        mode: Mapping[str, Any] | None = None,
    ) -> None:
        """Hand one prompt (one text part per text) to the session; returns on a 2xx.
        ``mode`` holds the body fields naming the agent and model (see prompt_mode)."""
        what = f"POST /session/{session_id}/prompt_async"
        body: dict[str, Any] = {"parts": [{"type": "text", "text": text} for text in texts]}
        body |= mode or {}
        headers = {"x-opencode-directory": directory, "accept": "application/json"}
        path = f"/session/{session_id}/prompt_async"
        status, answer = await self._call(what, "POST", path, headers, body)
        await self._refuse_missing_route(status, answer)
        if status == 404:
            raise SessionNotFound(f"{what}: HTTP 404: {short_text(answer)}")
        if not 200 <= status < 300:
            raise status_error(what, status, answer)
        if is_html(answer):  # a web page is no hand-off, whatever the status
            raise OpencodeError(f"{what}: HTTP {status}: a web page, not opencode's API")
        self.api.saw_v1()

    async def busy_sessions(self, directory: str) -> dict[str, str]:
        """``GET /session/status`` for one directory: busy (or retrying) sessions only."""
        answer = await self._get_json("/session/status", directory, names_session=False)
        if not isinstance(answer, dict):
            raise OpencodeError(
                f"GET /session/status: not an object: {short_text(str(answer).encode())}"
            )
        return {
            str(k): str(v.get("type")) if isinstance(v, dict) else "busy" for k, v in answer.items()
        }

    async def pending_permissions(self, directory: str) -> list[dict[str, Any]]:
        """``GET /permission``: the permission requests pending in ``directory``'s instance
        (only that one's: see notes/permissions.md)."""
        answer = await self._get_json("/permission", directory, names_session=False)
        if not isinstance(answer, list):
            raise OpencodeError(f"GET /permission: not a list: {short_text(str(answer).encode())}")
        return [p for p in answer if isinstance(p, dict)]

    async def reply_permission(self, request_id: str, directory: str, reply: str) -> bool:
        """``POST /permission/<id>/reply`` in the instance that holds it; False when opencode
        says it has no such request (1.18.33's 404; 1.15.4 answers 200 whatever the id)."""
        what = f"POST /permission/{request_id}/reply"
        headers = {"x-opencode-directory": directory, "accept": "application/json"}
        path = f"/permission/{request_id}/reply"
        status, answer = await self._call(what, "POST", path, headers, {"reply": reply})
        if status == 404:
            return False
        if not 200 <= status < 300:
            raise status_error(what, status, answer)
        return True

    async def agent_names(self, directory: str) -> set[str]:
        """The agents opencode has for ``directory`` (``GET /agent``)."""
        answer = await self._get_json("/agent", directory, names_session=False)
        if not isinstance(answer, list):
            raise OpencodeError(f"GET /agent: not a list: {short_text(str(answer).encode())}")
        return {a["name"] for a in answer if isinstance(a, dict) and isinstance(a.get("name"), str)}

    async def messages(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """The transcript, oldest first; with ``limit`` only the newest ``limit`` messages."""
        path = f"/session/{session_id}/message" + (f"?limit={limit}" if limit else "")
        try:
            answer = await self._get_json(path, directory)
        except DeadlineExceeded as e:
            self.transcript_reads.timed_out(session_id, str(e))
            raise
        except SessionNotFound:
            self.transcript_reads.succeeded(session_id)  # answered: nothing hangs
            raise
        self.transcript_reads.succeeded(session_id)
        if not isinstance(answer, list):
            return []
        return [m for m in answer if isinstance(m, dict) and isinstance(m.get("info"), dict)]

    async def message_infos(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Each message's ``info`` (role, agent, model, ...), oldest first."""
        return [m["info"] for m in await self.messages(session_id, directory, limit)]


def _is_page(response: IResponse) -> bool:
    """A web page (opencode's web app) where an event stream was asked for."""
    content_type = b"".join(response.headers.getRawHeaders(b"content-type", []))
    return b"text/html" in content_type.lower()
