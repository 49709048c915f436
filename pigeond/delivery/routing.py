"""Which targets are this daemon's to deliver to, when several daemons share one database.

On PostgreSQL several daemons, one per host, each beside its own opencode, serve one
queue.  A message is handed off only by the daemon whose opencode has its target: the
routes in ``swarm_routes`` (pigeond/storage/routes.py) say which, and each daemon keeps
its own fresh:

- before a drain, :meth:`Routing.mine` answers from memory while it can; otherwise from
  the route (another daemon's fresh route: not ours) or, for a target with no route or
  a stale one, by asking our opencode (``GET /session/<id>`` through the registry) and
  taking the route when it has the session;
- sessions our opencode shows on its event stream, and the senders of sends it accepts
  (an agent's plugin talks to the daemon of its own host), are routed here as they come
  (:meth:`Routing.seen`), so a send made through another host finds the route at once.

Answers are remembered for a while (a route of ours for ``REFRESH_S``, after which it
is written again, keeping it fresh; a "not ours" for ``MISS_S``), so a tick costs no
database read or opencode request per target, and a target no daemon has (a typo, a
deleted session) is asked about at most every ``MISS_S`` per daemon, never every tick.
Such a message waits, and expires as usual.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pigeond.model import RUNTIME_IDS, Runtime
from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.database import Database

log = Logger()

_OPENCODE_ID: Final = RUNTIME_IDS[Runtime.OPENCODE]
# A route not seen by its daemon for this long may move to a daemon that sees the session.
STALE_S: Final = 120.0
# How long an answer is kept in memory: ours (then written again, so never stale while
# the daemon runs), and not ours.
REFRESH_S: Final = 30.0
MISS_S: Final = 10.0
# The most targets remembered either way; the oldest are forgotten first.
MAX_REMEMBERED: Final = 10_000


class SessionLookup(Protocol):
    """What routing needs of the registry: does our opencode have the session?"""

    def cached(self, session_id: str) -> bool: ...

    async def exists(self, session_id: str) -> bool | None: ...


class Routing:
    def __init__(
        self,
        db: Database,
        registry: SessionLookup,
        clock: IReactorTime,
        daemon: str,
        opencode_url: str,
    ) -> None:
        self._db = db
        self._registry = registry
        self._clock = clock
        self.daemon = daemon
        self.opencode_url = opencode_url
        self._ours: dict[str, float] = {}  # target -> until when it is known to be ours
        self._not_ours: dict[str, float] = {}  # target -> until when it is known not to be

    async def mine(self, target: str) -> bool:
        """Whether this daemon delivers to ``target`` (see the module).  Routes are about
        opencode sessions: any other member is asked for its batches by its own agent, at
        the daemon that agent talks to, and is every daemon's."""
        if not _OPENCODE_ID.fullmatch(target):
            return True
        now = self._clock.seconds()
        if self._ours.get(target, 0.0) > now:
            return True
        if self._not_ours.get(target, 0.0) > now:
            return False
        now_ms = int(now * 1000)
        route = await self._db.read(SwarmRepository.route_of, target)
        fresh = route is not None and now_ms - route.last_seen_at < STALE_S * 1000
        if route is not None and route.daemon != self.daemon and fresh:
            return self._remember(target, False)
        if await self._registry.exists(target) is not True:
            if route is not None and route.daemon == self.daemon:
                await self._db.write(SwarmRepository.drop_route, target, self.daemon)
            return self._remember(target, False)
        routed = await self._record([target], now_ms)
        return self._remember(target, target in routed)

    async def routed_elsewhere(self, session: str) -> bool:
        """Whether another daemon's opencode has ``session``: a fresh route of its."""
        route = await self._db.read(SwarmRepository.route_of, session)
        if route is None or route.daemon == self.daemon:
            return False
        return int(self._clock.seconds() * 1000) - route.last_seen_at < STALE_S * 1000

    def sender(self, session: str) -> None:
        """A send came from ``session`` (an agent's plugin talks to its own host's daemon):
        routed here when our opencode has it, looked up once when not known yet."""
        if (
            not _OPENCODE_ID.fullmatch(session)
            or self._ours.get(session, 0.0) > self._clock.seconds()
        ):
            return
        if self._registry.cached(session):
            self.seen([session])
            return

        async def look_up() -> None:
            if await self._registry.exists(session) is True:
                self.seen([session])

        Deferred.fromCoroutine(look_up()).addErrback(
            lambda f: log.failure("looking up sender {session} failed", f, session=session)
        )

    def seen(self, sessions: Iterable[str]) -> None:
        """Our opencode has these sessions now (its event stream, a send's sender): route
        those not known to be ours yet.  Best effort: a failed write is logged, and the
        next drain or event writes again."""
        now = self._clock.seconds()
        new = sorted({s for s in sessions if self._ours.get(s, 0.0) <= now})
        if not new:
            return
        for session in new:  # written once, not once per event while the write is on its way
            self._ours[session] = now + REFRESH_S

        async def record() -> None:
            try:
                routed = await self._record(new, int(now * 1000))
            except StorageError as e:
                log.warn("could not route {sessions} here: {error}", sessions=new, error=str(e))
                routed = []
            for session in new:
                self._remember(session, session in routed)

        Deferred.fromCoroutine(record())

    async def _record(self, sessions: list[str], now_ms: int) -> list[str]:
        return await self._db.write(
            SwarmRepository.record_routes, sessions, self.daemon, self.opencode_url, now_ms,
            int(STALE_S * 1000),
        )  # fmt: skip

    def _remember(self, target: str, ours: bool) -> bool:
        until = self._clock.seconds() + (REFRESH_S if ours else MISS_S)
        (self._ours if ours else self._not_ours)[target] = until
        (self._not_ours if ours else self._ours).pop(target, None)
        for remembered in (self._ours, self._not_ours):
            while len(remembered) > MAX_REMEMBERED:
                remembered.pop(next(iter(remembered)))
        return ours
