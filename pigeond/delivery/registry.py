"""Which directory each session lives in, as opencode itself says.

Senders never pass a directory: pigeond asks opencode once, caches the answer
for a while, and sends every prompt for that session with the same
``x-opencode-directory`` header.  A 404 drops the cached entry.
"""

from __future__ import annotations

from typing import Protocol

from twisted.internet.interfaces import IReactorTime

from pigeond.config import Config
from pigeond.delivery.opencode_client import SessionNotFound


class DirectoryLookup(Protocol):
    async def session_directory(self, session_id: str) -> str: ...


class DirectoryResolver(Protocol):
    """What the arbiter and the verifier need of the registry."""

    async def resolve(self, session_id: str) -> str: ...

    def invalidate(self, session_id: str) -> None: ...


class SessionDirectoryRegistry:
    def __init__(self, lookup: DirectoryLookup, clock: IReactorTime, config: Config) -> None:
        """``config`` gives ``registry_ttl_s`` (see :meth:`configure`)."""
        self._lookup = lookup
        self._clock = clock
        self.configure(config)
        self._cache: dict[str, tuple[str, float]] = {}

    async def resolve(self, session_id: str) -> str:
        cached = self._cache.get(session_id)
        now = self._clock.seconds()
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            directory = await self._lookup.session_directory(session_id)
        except SessionNotFound:
            self.invalidate(session_id)
            raise
        self._cache[session_id] = (directory, self._clock.seconds() + self.ttl_s)
        return directory

    def invalidate(self, session_id: str) -> None:
        self._cache.pop(session_id, None)

    def configure(self, config: Config) -> None:
        """A reload's time to live, for the directories looked up from now on."""
        self.ttl_s = config.registry_ttl_s
