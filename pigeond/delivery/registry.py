"""Which directory each session lives in, as opencode itself says.

Senders never pass a directory: pigeond asks opencode once, caches the answer
for a while, and sends every prompt for that session with the same
``x-opencode-directory`` header.  A 404 drops the cached entry.

The cache also tells a send, at no cost, that its target exists
(:meth:`SessionDirectoryRegistry.cached`); a target not in it is looked up once
(:meth:`~SessionDirectoryRegistry.exists`), and the answer cached for the
hand-off that follows.  Lookups of one session under way at once share one
request: a burst of sends to a new target asks opencode once.

At most ``max_session_lookups`` lookups of distinct sessions are at opencode at once
(each under the client's deadline, ``handoff_timeout_s``): against an opencode that
accepts connections and never answers, a burst of sends to a hundred unknown sessions
must not hold a hundred requests open there.  A hand-off's lookup beyond the cap waits
for a slot; a send's target check does not wait: it asks :meth:`can_look_up_now` and,
when no slot is free, goes on unchecked (as with opencode down).
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from pigeond.config import Config
from pigeond.delivery.opencode_client import OpencodeError, SessionNotFound


class DirectoryLookup(Protocol):
    async def session_directory(self, session_id: str) -> str: ...


class DirectoryResolver(Protocol):
    """What the arbiter and the verifier need of the registry."""

    async def resolve(self, session_id: str) -> str: ...

    def invalidate(self, session_id: str) -> None: ...


class SessionDirectoryRegistry:
    def __init__(self, lookup: DirectoryLookup, clock: IReactorTime, config: Config) -> None:
        """``config`` gives ``registry_ttl_s`` and ``max_session_lookups`` (see
        :meth:`configure`)."""
        self._lookup = lookup
        self._clock = clock
        self._cache: dict[str, tuple[str, float]] = {}
        # sessions being looked up -> the callers waiting for that same lookup
        self._looking_up: dict[str, list[Deferred[str]]] = {}
        self.asking = 0  # lookups at opencode now (at most max_lookups)
        self._slot_waiters: deque[Deferred[None]] = deque()  # lookups waiting for a slot
        self.configure(config)

    async def resolve(self, session_id: str) -> str:
        cached = self._cache.get(session_id)
        now = self._clock.seconds()
        if cached is not None and cached[1] > now:
            return cached[0]
        waiters = self._looking_up.get(session_id)
        if waiters is not None:  # a lookup is under way: share its answer
            waiter: Deferred[str] = Deferred()
            waiters.append(waiter)
            return await waiter
        self._looking_up[session_id] = []
        try:
            await self._slot()
            try:
                directory = await self._lookup.session_directory(session_id)
            finally:
                self._release_slot()
        except SessionNotFound:
            self.invalidate(session_id)
            self._answer_waiters(session_id, Failure())
            raise
        except Exception:
            self._answer_waiters(session_id, Failure())
            raise
        self._cache[session_id] = (directory, self._clock.seconds() + self.ttl_s)
        self._answer_waiters(session_id, directory)
        return directory

    def _answer_waiters(self, session_id: str, result: str | Failure) -> None:
        for waiter in self._looking_up.pop(session_id, []):
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(result)

    def _slot(self) -> Deferred[None]:
        """A slot for one lookup at opencode: at once while fewer than ``max_lookups`` are
        under way, else when one ends (first come, first served)."""
        if self.asking < self.max_lookups and not self._slot_waiters:
            self.asking += 1
            return succeed(None)
        waiter: Deferred[None] = Deferred(self._slot_waiters.remove)
        self._slot_waiters.append(waiter)
        return waiter

    def _release_slot(self) -> None:
        self.asking -= 1
        self._grant_slots()

    def _grant_slots(self) -> None:
        while self._slot_waiters and self.asking < self.max_lookups:
            self.asking += 1
            self._slot_waiters.popleft().callback(None)

    def can_look_up_now(self, session_id: str) -> bool:
        """Whether an answer about ``session_id`` needs no wait for a slot: it is cached, a
        lookup of it is under way (to share), or a slot is free for a new one."""
        return (
            self.cached(session_id)
            or session_id in self._looking_up
            or (self.asking < self.max_lookups and not self._slot_waiters)
        )

    def cached(self, session_id: str) -> bool:
        """Whether opencode said, within ``registry_ttl_s``, that the session exists: a
        send to it needs no lookup, and awaits nothing."""
        entry = self._cache.get(session_id)
        return entry is not None and entry[1] > self._clock.seconds()

    async def exists(self, session_id: str) -> bool | None:
        """Whether opencode has the session: True (its directory is cached now), False
        (opencode answered 404), None (no clear answer: opencode unreachable, speaking an
        API pigeond does not, or failing)."""
        try:
            await self.resolve(session_id)
        except SessionNotFound:
            return False
        except OpencodeError:
            return None
        return True

    def invalidate(self, session_id: str) -> None:
        self._cache.pop(session_id, None)

    def configure(self, config: Config) -> None:
        """A reload's time to live, for the directories looked up from now on, and its cap
        on lookups at once (a raised cap lets waiting lookups go at once)."""
        self.ttl_s = config.registry_ttl_s
        self.max_lookups = config.max_session_lookups
        self._grant_slots()
