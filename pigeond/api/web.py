"""JSON over twisted.web: the router, the answer's shape, and bounded request bodies.

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
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python import failure
from twisted.web import http, server
from twisted.web.resource import Resource

from pigeond.api.send_request import InvalidRequest
from pigeond.api.site_limits import LimitedSite
from pigeond.config import DEFAULTS, Config
from pigeond.storage import StorageError, StorageUnavailable

DEFAULT_MAX_BODY_BYTES = DEFAULTS.max_body_bytes

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
Handler = Callable[[server.Request], Response | Coroutine[Any, Any, Response]]
# Runs before routing, on every request; raises HttpError to refuse it (access control).
Gate = Callable[[server.Request], None]


class BoundedRequest(server.Request):
    """A request that stops buffering its body past ``max_body_bytes``.

    The rest of an oversized body is read and dropped, so memory stays
    bounded, and the handler answers 413.
    """

    max_body_bytes = DEFAULT_MAX_BODY_BYTES
    body_too_large = False
    _body_bytes = 0

    def gotLength(self, length: int | None) -> None:
        if length is not None and length > self.max_body_bytes:
            self.body_too_large = True
            self.content = io.BytesIO()
            return
        super().gotLength(length)  # type: ignore[no-untyped-call]

    def _handleStar(self) -> None:
        """``OPTIONS *`` and ``GET *``: Twisted answers them itself, before any resource,
        so they would pass the access gate and get a body that is not JSON.  Route them
        like any other path instead (Twisted has no public hook; this is its private
        method for exactly that case): the gate refuses them or the API answers 404."""
        site = self.site
        assert site is not None  # set by the Site that made this request
        try:
            self.render(site.getResourceFor(self))  # type: ignore[no-untyped-call]
        except BaseException:
            self.processingFailed(failure.Failure())  # type: ignore[no-untyped-call]

    def handleContentChunk(self, data: bytes) -> None:
        self._body_bytes += len(data)
        if self._body_bytes > self.max_body_bytes:
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
    """Routes by exact path and method; one leaf resource for the whole API."""

    isLeaf = True

    def __init__(self, gate: Gate | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.gate = gate
        self._answering: set[Deferred[None]] = set()
        self._routes: dict[bytes, dict[bytes, Handler]] = {}
        self._prefixes: dict[bytes, dict[bytes, Handler]] = {}
        self._patterns: dict[tuple[bytes, ...], dict[bytes, Handler]] = {}

    def route(self, method: str, path: str, handler: Handler) -> None:
        self._routes.setdefault(path.encode("ascii"), {})[method.encode("ascii")] = handler

    def render(self, request: server.Request) -> bytes | int:
        try:
            answer = self._dispatch(request)
        except Exception as e:
            return self._write(request, self._error_response(request, e))
        if isinstance(answer, JsonResponse | TextResponse):
            return self._write(request, answer)
        return self._answer_later(request, Deferred.fromCoroutine(answer))

    def _answer_later(self, request: server.Request, answer: Deferred[Response]) -> int:
        """Write ``answer`` when it comes, unless the client hung up meanwhile (its work,
        a send's commit included, still runs to the end: a retry is idempotent)."""
        gone = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))

        def write(response: Response) -> None:
            if gone:
                return
            body = self._write(request, response)
            request.setHeader(b"content-length", str(len(body)).encode("ascii"))
            request.write(body)
            request.finish()

        def refuse(failure: failure.Failure) -> Response:
            error = failure.value
            if not isinstance(error, Exception):
                return failure  # type: ignore[return-value]  # BaseException: not ours to answer
            return self._error_response(request, error, failure)

        writing = (
            answer.addErrback(refuse)
            .addCallback(write)
            .addErrback(
                lambda f: log.failure("cannot write the answer to {path}", f, path=request.path)
            )
        )
        if not writing.called:
            self._answering.add(writing)
            writing.addBoth(lambda _: self._answering.discard(writing))
        return server.NOT_DONE_YET

    def answered(self) -> Deferred[None]:
        """Fires once every request being answered now has its answer written: at shutdown,
        a send whose commit is under way still gets its 202."""
        return DeferredList(list(self._answering), consumeErrors=True).addCallback(lambda _: None)

    @staticmethod
    def _error_response(
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

    def route_prefix(self, method: str, prefix: str, handler: Handler) -> None:
        """A route for every path under ``prefix`` (``/swarm/message/<id>``); the handler
        reads the rest from ``request.path``."""
        self._prefixes.setdefault(prefix.encode("ascii"), {})[method.encode("ascii")] = handler

    def route_pattern(self, method: str, pattern: str, handler: Handler) -> None:
        """A route for every path of ``pattern``'s shape, each ``{}`` one non-empty segment
        (``/swarm/channels/{}/members``); the handler reads them from ``request.path``.
        Unlike one prefix for several shapes, each shape answers 405 with its own methods."""
        segments = tuple(pattern.encode("ascii").split(b"/"))
        self._patterns.setdefault(segments, {})[method.encode("ascii")] = handler

    def served(self) -> set[tuple[str, str]]:
        """Every (method, path) answered; a prefix route's path ends in ``{}``, a pattern
        route's has ``{}`` for each segment it leaves open."""
        exact = {(m.decode(), p.decode()) for p, ms in self._routes.items() for m in ms}
        prefixed = {(m.decode(), p.decode() + "{}") for p, ms in self._prefixes.items() for m in ms}
        patterned = {
            (m.decode(), b"/".join(p).decode()) for p, ms in self._patterns.items() for m in ms
        }
        return exact | prefixed | patterned

    def _methods_for(self, path: bytes) -> dict[bytes, Handler] | None:
        methods = self._routes.get(path)
        if methods is not None:
            return methods
        segments = path.split(b"/")
        for pattern, patterned in self._patterns.items():
            if len(pattern) == len(segments) and all(
                s != b"" if p == b"{}" else s == p for p, s in zip(pattern, segments, strict=True)
            ):
                return patterned
        for prefix, prefixed in self._prefixes.items():
            if path.startswith(prefix) and len(path) > len(prefix):
                return prefixed
        return None

    def _dispatch(self, request: server.Request) -> Response | Coroutine[Any, Any, Response]:
        if self.gate is not None:
            self.gate(request)
        methods = self._methods_for(request.path or b"")
        if methods is None:
            raise HttpError(404, "no such route")
        method = request.method or b""
        handler = methods.get(method)
        if handler is None and method == b"HEAD":
            handler = methods.get(b"GET")
        if handler is None:
            allowed = b", ".join(sorted(methods))
            request.setHeader(b"allow", allowed)
            raise HttpError(405, f"method not allowed; use {allowed.decode('ascii')}")
        return handler(request)

    @staticmethod
    def _write(request: server.Request, response: Response) -> bytes:
        request.setResponseCode(response.status)
        request.setHeader(b"cache-control", b"no-store")
        request.setHeader(b"server", b"pigeond")  # not Twisted's name and version
        if isinstance(response, TextResponse):
            request.setHeader(b"content-type", response.content_type.encode("ascii"))
            return response.text.encode("utf-8")
        request.setHeader(b"content-type", b"application/json; charset=utf-8")
        for name, value in response.headers.items():
            request.setHeader(name.encode("ascii"), value.encode("ascii"))
        return json.dumps(response.body, ensure_ascii=False).encode("utf-8") + b"\n"


class QuietSite(LimitedSite):
    """No access log: the routes log the events that matter, with their msg_id."""

    noisy = False

    def configure(self, config: Config) -> None:
        """A reload's limits (see :func:`configure_site`)."""
        configure_site(
            self, config.max_body_bytes,
            request_timeout_s=config.request_timeout_s, max_connections=config.max_connections,
        )  # fmt: skip

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
    :mod:`pigeond.api.http_limits`): ``config`` gives ``max_body_bytes``,
    ``request_timeout_s`` and ``max_connections``.  ``idle_timeout_s`` closes a kept-alive
    connection that sends no next request.  ``reactor`` runs the timers (the global one
    when None)."""
    site = QuietSite(  # type: ignore[no-untyped-call]
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
        site.max_connections = max_connections


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
