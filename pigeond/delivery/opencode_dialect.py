"""One opencode URL, spoken to in the dialect its server speaks: 1.x or 2.x.

Which one is :class:`~pigeond.delivery.api_support.ApiSupport`'s verdict: 1.x is
recognised by its own routes, and ``GET /api/health`` is asked only once they are found
missing.  Three parts of delivery switch on it here, each one object that depends on
what it switches between through Protocols:

* :class:`SwitchingRuntime`, opencode's runtime on the delivery seam: a hand-off goes
  through the 1.x runtime (``prompt_async``) until a 1.x call finds the server to be
  2.x, then through the 2.x one (an admission to the session's queue).  The verdict is
  made again before each 2.x hand-off, and every 2.x call is refused unless the verdict
  in force then says 2.x (:class:`V2Exchange`: another drain may find a 1.x between a
  hand-off's preparation and its prompt), so a 2.x replaced by a 1.x is never sent a 2.x
  prompt nor a wait (on 1.18 a prompt would start a second agent loop beside the first);
* :class:`SwitchingTranscripts`, where the verifier, the recovery and the costs read a
  target's transcript;
* :class:`SwitchingDirectoryLookup`, how the registry (and with it the send-time target
  check) learns that a session exists and where it lives: ``GET /session/<id>`` on a
  1.x, ``GET /api/session/<id>`` on a 2.x (a 404 ``SessionNotFoundError``: no such
  session, refused at send as on a 1.x).

The 2.x calls go through the 1.x client's own exchange (:class:`V2Exchange`): the same
deadline, the same password (HTTP Basic, never logged), the same view of whether
opencode answers.  A 2.x call that finds its route missing makes the verdict again.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote

from pigeond.delivery.api_support import missing_v2_route
from pigeond.delivery.failures import FailureKind
from pigeond.delivery.opencode_errors import (
    OpencodeError,
    SessionNotFound,
    SpeaksV2,
    short_text,
    status_error,
)
from pigeond.delivery.registry import DirectoryLookup
from pigeond.delivery.runtime import (
    AgentRuntime,
    Delivery,
    Prepared,
    TranscriptSource,
    TranscriptView,
)
from pigeond.model import HandoffMode, Runtime


class Dialect(Protocol):
    """The verdict (:class:`~pigeond.delivery.api_support.ApiSupport`)."""

    @property
    def v2_version(self) -> str | None:
        """The 2.x version while opencode was last found to be a 2.x, else None."""
        ...

    @property
    def problem(self) -> str | None:
        """The sentence while opencode was last found to speak neither API."""
        ...

    async def verdict(self) -> str | None:
        """Recognise the server again (1.x's route first, then ``/api/health``)."""
        ...


BytesCall = Callable[
    [str, str, dict[str, str], bytes | None, float | None], Awaitable[tuple[int, bytes]]
]
"""One call to opencode: method, path, headers, body and its deadline (None: the usual
one), as :meth:`OpencodeClient.exchange_bytes` makes it; the status and body answered."""


WAIT_DEADLINE_S = 86_400.0
"""The 1.x client's own deadline on a ``POST …/wait``: as long as the longest
``turn_timeout_s``, since the 2.x client bounds that wait itself (a turn outlasts
``handoff_timeout_s``, each other call's deadline)."""


class V2Exchange:
    """The 2.x client's exchange (:class:`~pigeond.delivery.opencode_v2_client.Exchange`),
    made of the 1.x client's calls.  Nothing is sent unless the verdict in force says 2.x
    (the mirror of the 1.x client's refusal of a 2.x): a hand-off prepared before another
    call found a 1.x is an outage, never a 2.x prompt to a 1.x.  A missing route makes the
    verdict again, and a server no longer found to be 2.x is an outage for this call (the
    next goes as it speaks)."""

    def __init__(self, call: BytesCall, dialect: Dialect, url: str) -> None:
        self._call = call
        self._dialect = dialect
        self._url = url

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None = None
    ) -> tuple[int, bytes]:
        if self._dialect.v2_version is None:
            # the verdict changed since this call's hand-off was prepared (another drain
            # found a 1.x): on 1.18 a 2.x prompt would start a second agent loop
            raise OpencodeError(
                f"{method} {path.partition('?')[0]}: opencode at {self._url} is not known"
                " to be 2.x now; nothing sent",
                kind=FailureKind.OUTAGE,
            )
        waits = method == "POST" and path.partition("?")[0].endswith("/wait")
        deadline_s = WAIT_DEADLINE_S if waits else None
        status, answer = await self._call(method, path, headers, body, deadline_s)
        if missing_v2_route(status, answer):
            await self._dialect.verdict()
            if self._dialect.v2_version is None:
                raise OpencodeError(
                    f"{method} {path.partition('?')[0]}: HTTP {status}: opencode at"
                    f" {self._url} no longer answers as 2.x; recognising it again",
                    status, FailureKind.OUTAGE,
                )  # fmt: skip
        return status, answer


class V2Sessions:
    """``GET /api/session/{sessionID}``: whether a 2.x has the session, and its directory."""

    def __init__(self, exchange: V2Exchange) -> None:
        self._exchange = exchange

    async def session_directory(self, session_id: str) -> str:
        path = f"/api/session/{quote(session_id, safe='')}"
        what = f"GET {path}"
        status, body = await self._exchange.request("GET", path, {"accept": "application/json"})
        if status == 404:
            raise SessionNotFound(f"{what}: session not found")
        if status != 200:
            raise status_error(what, status, body)
        try:
            info = json.loads(body).get("data")
            directory = info["location"]["directory"]
        except (ValueError, AttributeError, KeyError, TypeError) as e:
            raise OpencodeError(f"{what}: no session's location in {short_text(body)}") from e
        if not isinstance(directory, str) or not directory or not directory.isprintable():
            raise OpencodeError(f"{what}: unusable directory {directory!r}")
        return directory


class SwitchingDirectoryLookup:
    """The registry's lookup: asked of the 1.x until it is found to be a 2.x."""

    def __init__(self, v1: DirectoryLookup, v2: DirectoryLookup, dialect: Dialect) -> None:
        self._v1 = v1
        self._v2 = v2
        self._dialect = dialect

    async def session_directory(self, session_id: str) -> str:
        if self._dialect.v2_version is None:
            try:
                return await self._v1.session_directory(session_id)
            except SpeaksV2:
                pass  # found to be a 2.x by this very call
        return await self._v2.session_directory(session_id)


class SwitchingTranscripts:
    """A target's transcript, read in the dialect its opencode speaks."""

    def __init__(self, v1: TranscriptSource, v2: TranscriptSource, dialect: Dialect) -> None:
        self._v1 = v1
        self._v2 = v2
        self._dialect = dialect

    async def read(self, target: str, limit: int | None) -> TranscriptView:
        if self._dialect.v2_version is None:
            try:
                return await self._v1.read(target, limit)
            except SpeaksV2:
                pass
        return await self._v2.read(target, limit)


@dataclass(slots=True)
class _Via:
    """A hand-off under way: the runtime that prepared it, and what it prepared."""

    runtime: AgentRuntime
    prepared: Prepared


class SwitchingRuntime:
    """opencode on the delivery seam (:class:`~pigeond.delivery.runtime.AgentRuntime`),
    handing off through the 1.x runtime or the 2.x one as the server speaks."""

    name: Runtime = Runtime.OPENCODE

    def __init__(self, v1: AgentRuntime, v2: AgentRuntime, dialect: Dialect) -> None:
        self._v1 = v1
        self._v2 = v2
        self._dialect = dialect
        v1_transcripts, v2_transcripts = v1.transcripts, v2.transcripts
        self.transcripts: TranscriptSource | None = (
            SwitchingTranscripts(v1_transcripts, v2_transcripts, dialect)
            if v1_transcripts is not None and v2_transcripts is not None
            else v1_transcripts
        )

    @property
    def steers(self) -> bool:
        """As the server found now speaks: a 1.x never steers, a 2.x may."""
        return self._current().steers

    def may_take_now(self, target: str) -> bool:
        return self._current().may_take_now(target)

    def _current(self) -> AgentRuntime:
        return self._v1 if self._dialect.v2_version is None else self._v2

    async def prepare(self, target: str) -> Prepared | None:
        if self._dialect.v2_version is not None:
            # made again before every 2.x hand-off: a 1.x is never sent a 2.x prompt
            await self._dialect.verdict()
        if self._dialect.v2_version is None:
            try:
                prepared = await self._v1.prepare(target)
            except SpeaksV2:
                pass  # found to be a 2.x by this very preparation
            else:
                if self._dialect.v2_version is None:
                    return _via(self._v1, prepared)
        return _via(self._v2, await self._v2.prepare(target))

    async def hand_off(
        self,
        target: str,
        prepared: Prepared,
        texts: Sequence[str],
        *,
        delivery: Delivery = Delivery.QUEUE,
    ) -> HandoffMode:
        via = prepared.detail
        assert isinstance(via, _Via)
        # a 1.x ignores STEER (it never steers); the 2.x that prepared it acts on it
        return await via.runtime.hand_off(target, via.prepared, texts, delivery=delivery)

    async def after_hand_off(self, target: str, prepared: Prepared) -> None:
        via = prepared.detail
        assert isinstance(via, _Via)
        await via.runtime.after_hand_off(target, via.prepared)

    def drain_ended(self, target: str) -> None:
        self._v1.drain_ended(target)
        self._v2.drain_ended(target)

    def stop(self) -> None:
        self._v1.stop()
        self._v2.stop()


def _via(runtime: AgentRuntime, prepared: Prepared | None) -> Prepared | None:
    return None if prepared is None else Prepared(prepared.waited, _Via(runtime, prepared))
