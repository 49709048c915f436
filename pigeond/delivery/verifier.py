"""Checking that handed-off messages really reached their target's transcript.

opencode answers 204 even when no turn starts (an unknown agent, a deleted
directory), so a 2xx is not proof.  A hand-off is *verified* once a user text
part in ``GET /session/<id>/message`` begins with the envelope's opening tag
carrying its msg_id; a payload that merely mentions the id does not count,
because the payload is escaped and can never begin a part with a tag.  A
message still missing after the grace period goes back to the queue (at most
``max_requeues`` times), then fails.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pigeond.config import Config
from pigeond.delivery.opencode_client import (
    OpencodeError,
    SessionNotFound,
    user_texts_of,
)
from pigeond.delivery.registry import DirectoryResolver
from pigeond.model import StoredMessage
from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.database import Database

log = Logger()

_OPENING_MSG_ID = re.compile(r'^<swarm_message [^>]*\bmsg_id="([^"]*)"')
RECENT_MESSAGES = 50
# Transcripts read at once.  Every target with hand-offs falls due in the same tick, so
# unbounded, a hundred targets meant a hundred transcripts (and their unverified rows)
# in memory together every interval: a burst that delayed hand-offs and set the
# process's memory high-water mark.  The rest wait their turn, each started as one ends.
CHECKS_AT_ONCE = 4


def envelope_ids(texts: Iterable[str]) -> set[str]:
    """msg_ids of the parts that begin with a ``<swarm_message ...>`` opening tag."""
    ids = set()
    for text in texts:
        match = _OPENING_MSG_ID.match(text)
        if match is not None:
            ids.add(match.group(1))
    return ids


class TranscriptReader(Protocol):
    """What the verifier reads (:class:`~pigeond.delivery.opencode_client.OpencodeClient`)."""

    async def messages(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]: ...


class Verifier:
    def __init__(
        self,
        db: Database,
        registry: DirectoryResolver,
        client: TranscriptReader,
        clock: IReactorTime,
        config: Config,
        *,
        on_requeued: Callable[[str], None] = lambda target: None,
        on_transcript: Callable[[str, list[dict[str, Any]]], None] = lambda target, infos: None,
    ) -> None:
        """``config`` gives ``verify_interval_s`` and ``max_requeues``."""
        self._db = db
        self._registry = registry
        self._client = client
        self._clock = clock
        self.configure(config)
        self._on_requeued = on_requeued
        self._on_transcript = on_transcript
        self._closed = False
        self._checking: dict[str, Deferred[None]] = {}
        self._waiting: deque[str] = deque()  # due targets waiting for one of CHECKS_AT_ONCE
        self._last_check: dict[str, float] = {}
        self._listing: Deferred[None] | None = None

    def configure(self, config: Config) -> None:
        """A reload's settings, from the next check on."""
        self._interval_s = config.verify_interval_s
        self._max_requeues = config.max_requeues

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    def tick(self) -> None:
        """Start a check for each target with unverified hand-offs, at most once per interval;
        nothing while the last tick's list of targets is still being read."""
        if self._listing is not None or self.is_closed():
            return
        listing = Deferred.fromCoroutine(self._check_targets())
        if listing.called:
            listing.addErrback(self._log_listing_failure)
            return
        self._listing = listing
        listing.addErrback(self._log_listing_failure)
        listing.addBoth(self._listed)

    def _listed(self, _: object) -> None:
        self._listing = None

    def _log_listing_failure(self, failure: Failure) -> None:
        if failure.check(StorageError):
            log.error("cannot list hand-offs to verify yet: {error}", error=str(failure.value))
        else:
            log.failure("listing hand-offs to verify failed", failure)

    async def _check_targets(self) -> None:
        targets = await self._db.read(SwarmRepository.verification_targets)
        now = self._clock.seconds()
        for target in targets:
            if target in self._checking or now - self._last_check.get(target, 0) < self._interval_s:
                continue
            self._last_check[target] = now
            if target not in self._waiting:
                self._waiting.append(target)
        self._start_checks()

    def _start_checks(self) -> None:
        """Start waiting checks while fewer than CHECKS_AT_ONCE run."""
        while self._waiting and len(self._checking) < CHECKS_AT_ONCE and not self.is_closed():
            target = self._waiting.popleft()
            check = Deferred.fromCoroutine(self.check(target))
            check.addErrback(self._log_failure, target)
            if not check.called:
                self._checking[target] = check
                check.addBoth(self._done, target)

    def _log_failure(self, failure: Failure, target: str) -> None:
        log.failure("verifying {target} failed", failure, target=target)

    def _done(self, result: object, target: str) -> object:
        self._checking.pop(target, None)
        self._start_checks()
        return result

    async def check(self, target: str) -> None:
        if self.is_closed():
            return
        try:
            waiting = await self._db.read(SwarmRepository.awaiting_verification, target)
        except StorageError as e:
            log.error("cannot read {target}'s hand-offs to verify yet: {error}",
                      target=target, error=str(e))  # fmt: skip
            return
        if not waiting:
            return
        now_ms = self._now_ms()
        overdue = any(m.verify_by is not None and m.verify_by <= now_ms for m in waiting)
        try:
            directory = await self._registry.resolve(target)
            # the newest messages first; the whole transcript only before giving up
            limit = None if overdue else max(RECENT_MESSAGES, 4 * len(waiting))
            messages = await self._client.messages(target, directory, limit)
            found = envelope_ids(user_texts_of(messages))
            # what the transcript says of the target's agent and model, for the next hand-off
            self._on_transcript(target, [m["info"] for m in messages])
        except SessionNotFound:
            found = set()
        except OpencodeError as e:
            log.info("cannot read {target}'s transcript yet: {error}", target=target, error=str(e))
            return
        if self.is_closed():
            return  # the database closed while the transcript was read (shutdown)
        try:
            await self._record(target, waiting, found)
        except StorageError as e:
            # a full or locked disk: nothing is lost, the same check runs again next interval
            log.error("cannot record what {target}'s transcript shows yet: {error}",
                      target=target, error=str(e))  # fmt: skip

    def close(self) -> None:
        """The database is about to close: a check that ends later writes nothing."""
        self._closed = True

    def is_closed(self) -> bool:
        return self._closed

    async def _record(self, target: str, waiting: list[StoredMessage], found: set[str]) -> None:
        now_ms = self._now_ms()
        verified = await self._db.write(
            SwarmRepository.mark_verified, [m.msg_id for m in waiting if m.msg_id in found], now_ms
        )
        for msg_id in verified:
            log.info("verified {msg_id} in {target}'s transcript", msg_id=msg_id, target=target)
        requeued = False
        for message in waiting:
            if message.msg_id in found or message.verify_by is None or message.verify_by > now_ms:
                continue
            reason = (
                "handed off but never reached the target's transcript"
                f" (requeue {message.requeue_count + 1} of {self._max_requeues})"
            )
            if message.requeue_count >= self._max_requeues:
                reason = (
                    f"handed off {message.requeue_count + 1} times but never reached"
                    " the target's transcript"
                )
            outcome = await self._db.write(
                SwarmRepository.requeue_unverified,
                message.msg_id, reason, now_ms, self._max_requeues,
            )  # fmt: skip
            log.warn(
                "{msg_id} to {target}: {reason} -> {outcome}",
                msg_id=message.msg_id, target=target, reason=reason, outcome=outcome,
            )  # fmt: skip
            requeued = requeued or outcome == "queued"
        if requeued:
            self._on_requeued(target)
