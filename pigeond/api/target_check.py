"""Refusing, at send, a message to a session opencode does not have.

Without it a send to a mistyped or deleted session got a 202 and failed a
minute later (false success).  A Claude Code session or an MCP-only member is known
once it registered (its hooks, its name claim): the registry's liveness asks
(:class:`pigeond.service.members.MemberLiveness`).  With opencode reachable, such a send gets 404
``{"error": "no session ses_… in opencode at <url>"}`` at once; otherwise it is
accepted as before, and the 202 says whether the target was checked
(``"target_checked": true|false``).

What it costs the accept path (see docs/performance.md): for a
target opencode named within ``registry_ttl_s`` (every target a hand-off or a
send went to lately) one dict lookup, and nothing awaited.  Any other target is
looked up once (``GET /session/<id>``) through the registry, which caches the
answer for the hand-off that follows; the send waits for it at most
``target_check_wait_s``, then goes on unchecked (the lookup still fills the cache).
Lookups of distinct sessions at opencode are capped (``max_session_lookups``, the
registry's): a send whose target would need a new lookup while the cap is reached is
accepted unchecked at once, as with opencode down; it never waits for a slot.
A database read happens only on the refusal path: a retry of a msg_id already
stored is answered as it always was (202, or 409), even once its target is gone,
so a client that lost its 202 never learns a different story.

It runs before the flood guard, so a refused send spends no sender token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine
from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pigeond.api.web import HttpError
from pigeond.config import Config
from pigeond.model import NewMessage, Runtime, runtime_of
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database

log = Logger()


class SessionRegistry(Protocol):
    """What the check needs of :class:`pigeond.delivery.registry.SessionDirectoryRegistry`."""

    def cached(self, session_id: str) -> bool: ...

    def can_look_up_now(self, session_id: str) -> bool: ...

    async def exists(self, session_id: str) -> bool | None: ...


class SharedRoutes(Protocol):
    """On a database several daemons share: the routes (pigeond/delivery/routing.py)."""

    def sender(self, session: str) -> None:
        """A send came from ``session``: routed here if our opencode has it."""

    async def routed_elsewhere(self, session: str) -> bool:
        """Whether another daemon's opencode has ``session`` (a fresh route of its)."""
        ...


def unknown_target(target: str, opencode_url: str) -> str:
    """Why a send to ``target`` is refused: where pigeond looked for it."""
    runtime = runtime_of(target)
    if runtime is Runtime.OPENCODE:
        return f"no session {target} in opencode at {opencode_url}"
    if runtime is Runtime.MCP:
        return (
            f"no member {target}: it exists once its pigeon-mcp has claimed its name"
            f" (pigeon-mcp --as @{target.removeprefix('mcp_')})"
        )
    return (
        f"no Claude Code session {target} is known to pigeond: a session registers when its"
        " hooks run (pigeon install-claude)"
    )


class TargetCheck:
    """Called with each parsed send: True when opencode has its target, False when it could
    not be checked (a channel message has no target); raises a 404 HttpError for a target
    opencode does not have.  The answer is a plain bool, with nothing to await, whenever the
    target is cached."""

    def __init__(
        self,
        registry: SessionRegistry,
        opencode_url: str,
        clock: IReactorTime,
        db: Database,
        config: Config,
        *,
        shared: SharedRoutes | None = None,
    ) -> None:
        """``config`` gives ``target_check_wait_s`` (see :meth:`configure`); ``shared``: the
        database is shared by several daemons (PostgreSQL), whose routes say which sessions
        the other hosts' opencodes have."""
        self._shared = shared
        self._registry = registry
        self._url = opencode_url.rstrip("/")
        self._clock = clock
        self._db = db
        self.configure(config)

    def configure(self, config: Config) -> None:
        """A reload's wait, for the sends from now on.  opencode answers a session lookup in
        milliseconds; one that takes longer is busy, starting or hanging, and a send must not
        wait for it long: the plugin's swarm_send gives up on a request after 5 s (and
        retries), pigeon-send after 10 s."""
        self.wait_s = config.target_check_wait_s

    def __call__(self, message: NewMessage) -> bool | Awaitable[bool]:
        if self._shared is not None:
            self._shared.sender(message.from_session)
        target = message.to_session
        if target is None:
            return False
        if self._registry.cached(target):
            return True
        if not self._registry.can_look_up_now(target):
            log.debug("no free session lookup for {target}: accepted unchecked", target=target)
            return False
        return self._look_up(message, target)

    async def _look_up(self, message: NewMessage, target: str) -> bool:
        found = await self._within_wait(target, self._registry.exists(target))
        if found is not False:
            return found is True
        if self._shared is not None:
            # another host's opencode may have it (routed already: checked; not yet: it
            # waits for the daemon whose opencode has it, and expires as usual)
            return await self._shared.routed_elsewhere(target)
        if await self._db.read(SwarmRepository.is_stored, message.msg_id):
            return False  # a retry: answered as it was when it was stored
        raise HttpError(404, unknown_target(target, self._url))

    async def _within_wait(
        self, target: str, lookup: Coroutine[Any, Any, bool | None]
    ) -> bool | None:
        """The lookup's answer, or None once ``wait_s`` has passed; the lookup itself goes
        on (its answer fills the cache), only this send stops waiting for it."""
        waiter: Deferred[bool | None] = Deferred()

        def settle(result: bool | Failure | None) -> None:
            if waiter.called:
                if isinstance(result, Failure):
                    log.failure("a target lookup failed after its send went on", result)
            elif isinstance(result, Failure):
                waiter.errback(result)  # a bug: the send gets the API's 500
            else:
                waiter.callback(result)

        def give_up() -> None:
            log.info("no answer from opencode about {target} within {s} s: accepted unchecked",
                     target=target, s=self.wait_s)  # fmt: skip
            settle(None)

        timer = self._clock.callLater(self.wait_s, give_up)
        Deferred.fromCoroutine(lookup).addBoth(settle)
        try:
            return await waiter
        finally:
            if timer.active():
                timer.cancel()
