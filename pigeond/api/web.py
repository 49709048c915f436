"""JSON over twisted.web: the API's resource, the answer's shape, and bounded request bodies.

Every answer is JSON, errors included (``{"error": "..."}``).  Handlers raise
:class:`HttpError` for anything the client did wrong; storage failures are a
503; anything else is logged with its traceback and answered with a plain
500, never a traceback.  A handler either answers at once or is a coroutine
(it waits for the database); either way the answer goes through the same
path, and an answer for a client that has gone is dropped.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_to_bytes

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python import failure
from twisted.web import http, server
from twisted.web.resource import Resource, getChildForRequest

from pigeond.api.route_table import Handler, RouteTable
from pigeond.api.send_request import InvalidRequest
from pigeond.api.site_limits import LimitedSite
from pigeond.config import DEFAULTS, Config
from pigeond.storage import StorageError, StorageUnavailable

DEFAULT_MAX_BODY_BYTES = DEFAULTS.max_body_bytes
SERVER_NAME = b"pigeond"  # not Twisted's name and version
# One encoder for every answer: json.dumps with an argument builds a new one each call.
ANSWER_JSON = json.JSONEncoder(ensure_ascii=False)

log = Logger()


@dataclass
class HttpError(Exception):
    """A refusal the client caused; ``headers`` go out with it (``Retry-After``, ...)."""

    status: int
    message: str
    extra: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JsonResponse:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TextResponse:
    """An answer that is not JSON (``GET /metrics``, in Prometheus' text format)."""

    status: int
    text: str
    content_type: str


Response = JsonResponse | TextResponse
# Runs before routing, on every request; raises HttpError to refuse it (access control).
Gate = Callable[[server.Request], None]


class HttpDate:
    """The ``Date`` header's value, made once a second rather than for every answer."""

    def __init__(self) -> None:
        self.second = -1
        self.value = b""

    def now(self) -> bytes:
        second = int(time.time())
        if second != self.second:
            self.second, self.value = second, http.datetimeToString(second)
        return self.value


HTTP_DATE = HttpDate()


class BoundedRequest(server.Request):
    """A request that stops buffering its body past ``max_body_bytes``.

    The rest of an oversized body is read and dropped, so memory stays
    bounded, and the handler answers 413.  ``OPTIONS *`` and ``GET *`` are routed like
    any other path (Twisted would answer them itself, before the access gate, with a body
    that is not JSON): the gate refuses them or the API answers 404.
    """

    max_body_bytes = DEFAULT_MAX_BODY_BYTES
    body_too_large = False
    body_bytes = 0

    def process(self) -> None:
        """``server.Request.process`` for pigeond's site, whose one resource is a leaf: the
        ``Server`` header set once (pigeond, not Twisted's name and version), the ``Date``
        made once a second, and every path routed alike, ``*`` included."""
        site: server.Site = self.channel.site  # type: ignore[attr-defined]
        self.site = site
        headers = self.responseHeaders
        headers.setRawHeaders(b"server", [SERVER_NAME])
        headers.setRawHeaders(b"date", [HTTP_DATE.now()])
        self.prepath = []
        self.sitepath: list[bytes] = []
        self.postpath = list(map(unquote_to_bytes, self.path[1:].split(b"/")))
        try:
            self.render(getChildForRequest(site.resource, self))  # type: ignore[no-untyped-call]
        except BaseException:
            self.processingFailed(failure.Failure())  # type: ignore[no-untyped-call]

    def gotLength(self, length: int | None) -> None:
        if length is not None and length > self.max_body_bytes:
            self.body_too_large = True
            self.content = io.BytesIO()
            return
        super().gotLength(length)  # type: ignore[no-untyped-call]

    def handleContentChunk(self, data: bytes) -> None:
        self.body_bytes += len(data)
        if self.body_bytes > self.max_body_bytes:
            self.body_too_large = True
        if not self.body_too_large:
            super().handleContentChunk(data)  # type: ignore[no-untyped-call]


def bounded_request_factory(max_body_bytes: int) -> type[BoundedRequest]:
    return type("BoundedRequest", (BoundedRequest,), {"max_body_bytes": max_body_bytes})


def read_body(request: server.Request) -> bytes:
    if getattr(request, "body_too_large", False):
        limit = getattr(request, "max_body_bytes", DEFAULT_MAX_BODY_BYTES)
        raise HttpError(413, f"request body is larger than the limit of {limit} bytes")
    content = request.content
    if content is None:
        return b""
    content.seek(0)
    data: bytes = content.read()
    return data


def query_param(request: server.Request, name: str) -> str | None:
    """One query parameter, decoded; a repeated parameter is a 400."""
    args = request.args or {}
    values = args.get(name.encode("ascii"))
    if not values:
        return None
    if len(values) > 1:
        raise HttpError(400, f"query parameter '{name}' is given more than once")
    try:
        text: str = values[0].decode("utf-8")
    except UnicodeDecodeError as e:
        raise HttpError(400, f"query parameter '{name}' is not valid UTF-8") from e
    return text


class JsonApi(Resource):
    """One leaf resource for the whole API: routes each request by its path and method in
    one :class:`~pigeond.api.route_table.RouteTable`, and writes the answer."""

    isLeaf = True

    def __init__(self, gate: Gate | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.gate = gate
        self.answering: set[Deferred[None]] = set()
        self.table = RouteTable()

    def route(self, method: str, path: str, handler: Handler) -> None:
        """Route ``method`` on ``path``; each ``{name}`` segment of ``path`` is one
        non-empty segment, handed to ``handler`` as the argument ``name`` (a ``str``)."""
        self.table.add(method, path, handler)

    def served(self) -> set[tuple[str, str]]:
        """Every (method, path) answered, with ``{}`` for each path parameter."""
        return self.table.shapes()

    def render(self, request: server.Request) -> bytes | int:
        try:
            answer = self.dispatch(request)
        except Exception as e:
            return write_response(request, error_response(request, e))
        if isinstance(answer, JsonResponse | TextResponse):
            return write_response(request, answer)
        return self.answer_later(request, answer)

    def answer_later(self, request: server.Request, answer: Coroutine[Any, Any, Response]) -> int:
        """Write ``answer`` when it comes, unless the client hung up meanwhile (its work,
        a send's commit included, still runs to the end: a retry is idempotent)."""
        writing = Deferred.fromCoroutine(answer_when_done(request, answer))
        if not writing.called:
            self.answering.add(writing)
            writing.addBoth(self.answered_one, writing)
        return server.NOT_DONE_YET

    def answered_one(self, result: object, writing: Deferred[None]) -> object:
        self.answering.discard(writing)
        return result

    def answered(self) -> Deferred[None]:
        """Fires once every request being answered now has its answer written: at shutdown,
        a send whose commit is under way still gets its 202."""
        return DeferredList(list(self.answering), consumeErrors=True).addCallback(lambda _: None)

    def dispatch(self, request: server.Request) -> Response | Coroutine[Any, Any, Response]:
        if self.gate is not None:
            self.gate(request)
        found = self.table.match(request.path or b"")
        if found is None:
            raise HttpError(404, "no such route")
        methods, raw = found
        method = request.method or b""
        handler = methods.get(method)
        if handler is None and method == b"HEAD":
            handler = methods.get(b"GET")
        if handler is None:
            allowed = b", ".join(sorted(methods))
            request.setHeader(b"allow", allowed)
            raise HttpError(405, f"method not allowed; use {allowed.decode('ascii')}")
        answer: Response | Coroutine[Any, Any, Response] = handler(request, **path_params(raw))
        return answer


async def answer_when_done(request: server.Request, answer: Coroutine[Any, Any, Response]) -> None:
    """Await the handler's ``answer`` and write it (an error's answer if it raised), in
    one coroutine: no Deferred callbacks per answer beyond the one that drives it."""
    try:
        response = await answer
    except Exception as e:
        response = error_response(request, e)
    if getattr(request, "channel", None) is None:  # the client hung up: Twisted let go of it
        return
    try:
        write_answer(request, response)
    except Exception:
        log.failure("cannot write the answer to {path}", path=request.path)


def write_answer(request: server.Request, response: Response) -> None:
    """Write ``response`` whole and finish ``request`` (an answer that came later)."""
    body = write_response(request, response)
    request.setHeader(b"content-length", b"%d" % len(body))
    request.write(body)
    request.finish()


def path_params(raw: dict[str, bytes]) -> dict[str, str]:
    """The path's parameters, decoded; one that is not UTF-8 is a 400."""
    params = {}
    for name, value in raw.items():
        try:
            params[name] = value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise HttpError(400, f"the {name} in the path is not valid UTF-8") from e
    return params


def error_response(
    request: server.Request, error: Exception, caught: failure.Failure | None = None
) -> JsonResponse:
    """The answer for a handler's exception: the client's fault, storage, or ours."""
    if isinstance(error, HttpError):
        body = {"error": error.message, **error.extra}
        return JsonResponse(error.status, body, error.headers)
    if isinstance(error, InvalidRequest):
        return JsonResponse(400, {"error": str(error)})
    if isinstance(error, StorageUnavailable):
        log.error("storage unavailable: {error}", error=str(error))
        return JsonResponse(503, {"error": f"storage unavailable, nothing stored: {error}"})
    if isinstance(error, StorageError):
        log.error("storage error: {error}", error=str(error))
        return JsonResponse(503, {"error": f"storage error: {error}"})
    log.failure(
        "unexpected error on {method} {path}",
        caught or failure.Failure(error, type(error), error.__traceback__),
        method=request.method,
        path=request.path,
    )
    return JsonResponse(500, {"error": "internal error; see the daemon's log"})


def write_response(request: server.Request, response: Response) -> bytes:
    """Set ``response``'s status and headers on ``request``; its body, to write."""
    request.setResponseCode(response.status)
    request.setHeader(b"cache-control", b"no-store")
    if isinstance(response, TextResponse):
        request.setHeader(b"content-type", response.content_type.encode("ascii"))
        return response.text.encode("utf-8")
    request.setHeader(b"content-type", b"application/json; charset=utf-8")
    for name, value in response.headers.items():
        request.setHeader(name.encode("ascii"), value.encode("ascii"))
    return ANSWER_JSON.encode(response.body).encode("utf-8") + b"\n"


class QuietSite(LimitedSite):
    """No access log: the routes log the events that matter, with their msg_id."""

    noisy = False

    def configure(self, config: Config) -> None:
        """A reload's limits (see :func:`configure_site`)."""
        configure_site(
            self, config.max_body_bytes,
            request_timeout_s=config.request_timeout_s, max_connections=config.max_connections,
        )  # fmt: skip

    def startFactory(self) -> None:
        """Nothing to open: ``HTTPFactory``'s own start opens the access log and refreshes
        its timestamp on a timer of its own every second, a wake-up of an idle daemon for a
        log that is never written."""

    def log(self, request: http.Request) -> None:
        pass


def make_site(
    api: Resource,
    config: Config,
    idle_timeout_s: float = 60.0,
    *,
    reactor: IReactorTime | None = None,
) -> QuietSite:
    """The daemon's site: JSON for every answer, bodies bounded, connections bounded (see
    :mod:`pigeond.api.http_limits` and :mod:`pigeond.api.connection_slots`): ``config``
    gives ``max_body_bytes``, ``request_timeout_s`` and ``max_connections``.
    ``idle_timeout_s`` closes a kept-alive connection that sends no next request.
    ``reactor`` runs the timers (the global one when None)."""
    site = QuietSite(
        api,
        requestFactory=bounded_request_factory(config.max_body_bytes),
        # the API takes JSON only: a form or multipart body is never parsed into args
        parsePOSTFormSubmission=False,
        reactor=reactor,
    )
    site.displayTracebacks = False
    site.timeOut = idle_timeout_s
    site.configure(config)
    return site


def configure_site(
    site: server.Site, max_body_bytes: int, *, request_timeout_s: float, max_connections: int
) -> None:
    """Apply new limits to a running site (SIGHUP): the body limit to requests on new
    connections, the deadline to the next request on any connection, the connection cap
    to the next connection."""
    site.requestFactory = bounded_request_factory(max_body_bytes)
    if isinstance(site, LimitedSite):
        site.request_timeout_s = request_timeout_s
        site.slots.max_connections = max_connections


__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "Gate",
    "HttpError",
    "JsonApi",
    "JsonResponse",
    "Response",
    "TextResponse",
    "configure_site",
    "make_site",
    "query_param",
    "read_body",
]
