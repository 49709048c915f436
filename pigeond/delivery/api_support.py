"""Which API does the opencode at ``opencode_url`` speak: 1.x's, 2.x's, or neither?

opencode 2.x serves a new API under ``/api/*``, without ``prompt_async`` or
``/global/event``.  pigeond speaks both, and must never send a 2.x call to a 1.x: on
1.18.33 a v2 prompt to a session driven through v1 starts a second agent loop
beside the first.  So 1.x is recognised by its own routes first, and only once they are
found missing is ``GET /api/health`` asked (a read that acts on nothing; a 2.x answers
``{"healthy": true, "version": "2…"}``): a 2.x is then spoken to through its own API
(:attr:`ApiSupport.v2_version`; see :mod:`pigeond.delivery.opencode_dialect`).  An
opencode with neither gets nothing more, and every message waits for it as for an
outage (no attempt spent, nothing failed) under one plain sentence
(:func:`unsupported_text`), logged once and shown by ``/health``, ``STATUS=`` and the TUI.

How a missing route looks, measured on opencode 1.15.4 and 1.18.33: a path it
has no route for is answered by its web app (200, ``text/html``), GET and POST
alike; a session it does not have is a 404 with its JSON ``NotFoundError``.  A
server that knows no such fallback answers 404 with a body of its own.  One
such answer to a v1 call (:func:`missing_route`) makes pigeond probe
``GET /session/status``, the v1 route it polls, which every 1.x answers with a
JSON object; if that is missing too, v1 is gone, and ``GET /api/health`` says whether
it is a 2.x.  Any later v1 answer (JSON from a v1 route) clears the verdict, 2.x or
neither: opencode was replaced by one that speaks v1.  An opencode 1.x never gives such
an answer, so it is never probed, and never asked anything under ``/api/``.  A 2.x
verdict is made again before each 2.x hand-off and whenever a 2.x call finds its route
missing, so a 2.x replaced by a 1.x is recognised before anything is sent to it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from pigeond.delivery.opencode_errors import OUTAGE_STATUSES

log = Logger()

PROBE_PATH = "/session/status"
_HTML_STARTS = (b"<!doctype html", b"<html")


def v2_text(url: str, version: str) -> str:
    """What is said of a 2.x opencode, once when it is found."""
    return f"opencode at {url} is {version} (2.x): delivering through its /api/ routes"


def unsupported_text(url: str) -> str:
    """The sentence operators and senders see while v1 is missing."""
    return f"opencode at {url} speaks an API pigeond does not support (2.x?)"


def is_html(body: bytes) -> bool:
    """A web page (opencode's web app answers the paths it has no route for)."""
    return body.lstrip()[:16].lower().startswith(_HTML_STARTS)


def is_opencode_not_found(body: bytes) -> bool:
    """opencode's own 404: ``{"name": "NotFoundError", "data": {...}}``."""
    try:
        answer = json.loads(body)
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("name") == "NotFoundError"


def missing_route(status: int, body: bytes) -> bool:
    """Whether an answer to a v1 call says the route is not there (see the module)."""
    if 200 <= status < 300:
        return is_html(body)
    return status in (404, 405) and not is_opencode_not_found(body)


def missing_v2_route(status: int, body: bytes) -> bool:
    """An answer to a 2.x call saying its route is not there: a web page, or a 404 or 405
    that is not one of 2.x's own errors (which name themselves in ``_tag``)."""
    if is_html(body):
        return True
    if status not in (404, 405):
        return False
    try:
        answer = json.loads(body)
    except ValueError:
        return True
    return not (isinstance(answer, dict) and isinstance(answer.get("_tag"), str))


def health_version(status: int, body: bytes) -> str | None:
    """The version a ``GET /api/health`` answer names when it is a 2.x server's, else None."""
    if status != 200:
        return None
    try:
        answer = json.loads(body)
    except ValueError:
        return None  # a 1.x: its web app's page
    if not isinstance(answer, dict) or answer.get("healthy") is not True:
        return None
    version = answer.get("version")
    return version if isinstance(version, str) and version.startswith("2.") else None


# One probe: (status, body), or None when it got no answer (an outage decides nothing).
Probe = Callable[[], Awaitable[tuple[int, bytes] | None]]
HEALTH_PATH = "/api/health"


async def _no_v2() -> None:
    return None


class ApiSupport:
    """The verdict on one opencode URL, and the probes that make it; one per client.

    ``problem`` is the sentence while the last probe found neither v1 nor a 2.x, else
    None; ``v2_version`` the 2.x version while the last probe found a 2.x, else None.
    Concurrent askers share one probe (a burst of sends to a 2.x must not make a
    burst of probes)."""

    def __init__(self, url: str, probe: Probe, v2_probe: Probe = _no_v2) -> None:
        self._url = url
        self._probe = probe
        self._v2_probe = v2_probe
        self.problem: str | None = None
        self.v2_version: str | None = None
        self._waiters: list[Deferred[str | None]] | None = None
        self._v2_waiters: list[Deferred[None]] = []

    def when_v2(self) -> Deferred[None]:
        """Fires once a probe finds a 2.x (at once while one is found): what waits for a
        2.x waits for this, not on a timer."""
        if self.v2_version is not None:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._v2_waiters.append(waiter)
        return waiter

    def saw_v1(self) -> None:
        """A v1 route answered as v1 does: whatever was found before is gone."""
        if self.problem is not None or self.v2_version is not None:
            self.problem = self.v2_version = None
            log.info("opencode at {url} answers pigeond's API again; delivery resumes",
                     url=self._url)  # fmt: skip

    async def verdict(self) -> str | None:
        """Probe (or join the probe under way): the sentence if opencode speaks neither v1
        nor 2.x, else None (v1 is there, a 2.x is: see :attr:`v2_version`, or the probe
        got no clear answer, which changes nothing)."""
        if self._waiters is not None:
            waiter: Deferred[str | None] = Deferred()
            self._waiters.append(waiter)
            return await waiter
        self._waiters = []
        try:
            result = await self._judge(await self._probe())
        except Exception:
            failure = Failure()
            for waiter in self._release():
                waiter.errback(failure)
            raise
        for waiter in self._release():
            waiter.callback(result)
        return result

    def _release(self) -> list[Deferred[str | None]]:
        waiters = self._waiters or []
        self._waiters = None
        return waiters

    async def _judge(self, answer: tuple[int, bytes] | None) -> str | None:
        if answer is None:
            return None
        status, body = answer
        if 200 <= status < 300 and _is_json_object(body):
            self.saw_v1()
            return None
        if not (missing_route(status, body) or 200 <= status < 300):
            return None  # a 5xx, a 401...: says nothing of the API
        health = await self._v2_probe()  # v1 is missing: only now may /api/ be asked
        if health is None or health[0] in OUTAGE_STATUSES:
            return self.problem  # no clear answer: the verdict stands
        version = health_version(*health)
        if version is not None:
            if version != self.v2_version:
                log.info("{text}", text=v2_text(self._url, version))
            self.problem, self.v2_version = None, version
            waiters, self._v2_waiters = self._v2_waiters, []
            for waiter in waiters:
                if not waiter.called:  # (one cancelled by its waiter is done)
                    waiter.callback(None)
            return None
        self.v2_version = None
        if self.problem is None:
            self.problem = unsupported_text(self._url)
            log.error(
                "{problem}: GET {path} answered HTTP {status} ({what}), not opencode's v1"
                " API; holding every message (no attempt spent) until it does",
                problem=self.problem, path=PROBE_PATH, status=status,
                what="a web page" if is_html(body) else "no such route",
            )  # fmt: skip
        return self.problem


def _is_json_object(body: bytes) -> bool:
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False
