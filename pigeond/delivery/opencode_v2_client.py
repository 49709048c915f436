"""The calls pigeond makes to an opencode 2.x server: admitting a prompt, reading a
transcript, waiting until a session is idle.

Whether a server is a 2.x is :mod:`pigeond.delivery.api_support`'s verdict (1.x's own
route asked first, then ``GET /api/health``, a read that acts on nothing).  No v2 route
is ever tried on a server not found to be 2.x that way: on 1.18 the preview ``POST
/api/session/<id>/prompt`` starts a second agent loop beside the first.

A 2.x server always asks for HTTP Basic auth (user ``opencode``); the exchange given
carries it (:class:`~pigeond.http_exchange.HttpExchange`'s ``auth``), and nothing here
logs it.

Swarm messages are not a person's turn, so an input goes as ``POST
/api/session/{id}/synthetic`` (``{"id", "text", "delivery"}``, input that is no user
turn; released 2.3.0) where the server has that route, and as ``/prompt`` where it does
not.  Which it is, is learnt without risk from the first admission: ``/synthetic`` is
tried, and an answer saying its route is missing (a web page, or a 404 or 405 that is
none of 2.x's own errors: nothing admitted) is remembered, and that input and every later
one go to ``/prompt``.  Any other answer means the server has the route, and it is used
from then on, until the verdict on the server changes (another server may be there).
Since a server that has the route always has it, an admission id only ever goes to one
route: a retry after a crash tries ``/synthetic`` first again and, on a server that has
it, re-admits the same input there.  The v2 types of npm ``@opencode-ai/sdk`` 1.19.6
lack ``/synthetic``; the released 2.3.0 protocol has it.

The prompt body: the released protocol's is flat (``{"id", "text", "delivery"}``), the
v2 types of npm ``@opencode-ai/sdk`` 1.19.6 nest the text (``{"id", "prompt": {"text"},
"delivery"}``).  The flat one is sent first; a 400 (nothing admitted) makes the nested
one go, and the server's shape is remembered.  The order is always the same, so a
retry of an admission sends the very body that was admitted, and gets its receipt.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from twisted.internet.defer import Deferred, TimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.web.client import ResponseFailed

from pigeond.delivery.api_support import missing_v2_route
from pigeond.delivery.failures import FailureKind, HandOffError
from pigeond.delivery.opencode_errors import (
    CLOSED_BEFORE_ANSWER,
    CONNECTION_GONE,
    DeadlineExceeded,
    describe_transport_error,
    short_text,
    status_error,
)
from pigeond.delivery.transcript_reads import TranscriptReadWatch

T = TypeVar("T")
PROMPT_SHAPES = ("flat", "nested")
"""The prompt bodies sent, in this order (see the module)."""


class Exchange(Protocol):
    """One HTTP call (:class:`~pigeond.delivery.http_exchange.HttpExchange`)."""

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None = None
    ) -> tuple[int, bytes]: ...


class AdmissionConflict(HandOffError):
    """opencode holds another input under the admission id: its record and pigeond's
    disagree.  Nothing new was admitted; the target is held (an outage: no attempt
    spent), and the same body only ever goes again under that id."""

    def __init__(self, session_id: str, admission_id: str, body: bytes) -> None:
        super().__init__(
            f"opencode 2.x holds another input under {admission_id} for {session_id}"
            f" (409: {short_text(body)}); held, nothing sent anew",
            409,
            FailureKind.OUTAGE,
        )


def prompt_body(
    shape: str, admission_id: str, text: str, delivery: str = "queue"
) -> dict[str, Any]:
    """An input (``synthetic``: the synthetic route's body) that names no agent and no
    model (the session keeps its own), queued or steering."""
    if shape == "nested":
        return {"id": admission_id, "prompt": {"text": text}, "delivery": delivery}
    return {"id": admission_id, "text": text, "delivery": delivery}


class OpencodeV2Client:
    """Calls to one opencode 2.x server, each within ``timeout_s``."""

    def __init__(
        self,
        exchange: Exchange,
        clock: IReactorTime,
        timeout_s: float,
        *,
        reads: TranscriptReadWatch | None = None,
        version: Callable[[], str | None] = lambda: None,
    ) -> None:
        """``reads`` is told each transcript read that passes its deadline, and each that
        does not (the 1.x client's, so that ``/health`` tells both alike).  ``version``
        gives the 2.x version the verdict in force found (what is learnt of the server
        holds for that verdict only: a server replaced is learnt anew)."""
        self._exchange = exchange
        self._clock = clock
        self._reads = reads or TranscriptReadWatch(clock)
        self.timeout_s = timeout_s
        self._version = version
        self._shape = PROMPT_SHAPES[0]
        self._synthetic: tuple[str | None, bool] | None = None

    @property
    def synthetic(self) -> bool | None:
        """Whether the server has ``/synthetic`` (None: not known of the server found now)."""
        known = self._synthetic
        return known[1] if known is not None and known[0] == self._version() else None

    async def admit(
        self, session_id: str, admission_id: str, text: str, delivery: str = "queue"
    ) -> dict[str, Any]:
        """Admit ``text`` to the session under ``admission_id`` (``delivery``: queue or
        steer), as synthetic input where the server has it; the receipt."""
        session = quote(session_id, safe="")
        path = f"/api/session/{session}/synthetic"
        status, body = 0, b""
        if self.synthetic is not False:
            request = json.dumps(prompt_body("flat", admission_id, text, delivery)).encode()
            status, body = await self._call("POST", path, request)
            # any answer but a missing route's says the route is there
            self._synthetic = (self._version(), not missing_v2_route(status, body))
        if self.synthetic is False:
            path = f"/api/session/{session}/prompt"
            status, body = await self._prompt(path, admission_id, text, delivery)
        if status == 409:
            raise AdmissionConflict(session_id, admission_id, body)
        if status == 404 and _tag(body) == "SessionNotFoundError":
            raise HandOffError(f"no session {session_id} at opencode", 404, FailureKind.PERMANENT)
        if status != 200:
            raise status_error(f"POST {path}", status, body)
        receipt = _data(body, f"POST {path}")
        if not isinstance(receipt, dict):
            raise HandOffError(f"POST {path}: no receipt in {short_text(body)}", status)
        return receipt

    async def _prompt(
        self, path: str, admission_id: str, text: str, delivery: str
    ) -> tuple[int, bytes]:
        status, body = 0, b""
        # a shape before the one remembered would only be refused again (400)
        for shape in PROMPT_SHAPES[PROMPT_SHAPES.index(self._shape) :]:
            request = json.dumps(prompt_body(shape, admission_id, text, delivery)).encode()
            status, body = await self._call("POST", path, request)
            if status != 400:
                self._shape = shape
                break
        return status, body

    async def messages(self, session_id: str, limit: int | None) -> list[dict[str, Any]]:
        """The session's transcript, oldest first: its newest ``limit`` messages (all when
        None).  A session the server does not have is an empty one."""
        path = f"/api/session/{quote(session_id, safe='')}/message"
        query = "?order=asc" if limit is None else f"?order=desc&limit={limit}"
        try:
            status, body = await self._call("GET", path + query)
        except DeadlineExceeded as e:
            self._reads.timed_out(session_id, str(e))
            raise
        self._reads.succeeded(session_id)  # answered: nothing hangs
        if status == 404:
            return []
        if status != 200:
            raise status_error(f"GET {path}", status, body)
        messages = _data(body, f"GET {path}")
        if not isinstance(messages, list):
            raise HandOffError(f"GET {path}: no list of messages", status, FailureKind.OUTAGE)
        found = [m for m in messages if isinstance(m, dict)]
        return found if limit is None else found[::-1]

    async def wait_idle(self, session_id: str, timeout_s: float) -> bool:
        """Whether the session went idle (``POST …/wait``) within ``timeout_s``; a wait the
        server ends itself while the session still runs (503) is made again."""
        path = f"/api/session/{quote(session_id, safe='')}/wait"
        deadline = self._clock.seconds() + timeout_s
        while (left := deadline - self._clock.seconds()) > 0:
            try:
                status, body = await self._call("POST", path, b"", timeout_s=left)
            except DeadlineExceeded:
                return False
            if status in (204, 404):  # idle, or no such session: nothing to wait for
                return True
            if status != 503:
                raise status_error(f"POST {path}", status, body)
        return False

    async def _call(
        self, method: str, path: str, body: bytes | None = None, *, timeout_s: float | None = None
    ) -> tuple[int, bytes]:
        """One call within its deadline; an answer whatever its status, or HandOffError:
        no answer (an outage), or none in time (an attempt: it may have been admitted)."""
        headers = {"accept": "application/json"}
        if body is not None:
            headers["content-type"] = "application/json"
        what = f"{method} {path.partition('?')[0]}"
        call = self._exchange.request(method, path, headers, body)
        try:
            return await _within(call, timeout_s or self.timeout_s, self._clock)
        except TimeoutError as e:
            # it may have acted: its messages are looked for in the transcript before a retry
            raise DeadlineExceeded(
                f"{what}: no answer within {timeout_s or self.timeout_s} s"
            ) from e
        except (*CONNECTION_GONE, *CLOSED_BEFORE_ANSWER) as e:
            text = f"{what}: {describe_transport_error(e)}"
            raise HandOffError(text, kind=FailureKind.OUTAGE) from e
        except ResponseFailed as e:  # cut in the middle of an answer: it may have acted
            raise HandOffError(f"{what}: {describe_transport_error(e)}") from e


async def _within(call: Awaitable[T], timeout_s: float, clock: IReactorTime) -> T:
    deferred: Deferred[T] = Deferred.fromCoroutine(_awaited(call))
    deferred.addTimeout(timeout_s, clock)
    return await deferred


async def _awaited(call: Awaitable[T]) -> T:
    return await call


def _tag(body: bytes) -> object:
    """The ``_tag`` naming a 2.x error (``SessionNotFoundError``…), if the body has one."""
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    return answer.get("_tag") if isinstance(answer, dict) else None


def _data(body: bytes, what: str) -> Any:
    """The ``data`` of a 2.x answer (``{"data": …}``)."""
    try:
        answer = json.loads(body)
    except ValueError as e:
        raise HandOffError(f"{what}: not JSON: {short_text(body)}") from e
    if not isinstance(answer, dict) or "data" not in answer:
        raise HandOffError(f"{what}: no data in {short_text(body)}")
    return answer["data"]
