"""Exactly once across a crash: the intent to hand off, and ending the doubt it leaves.

A prompt opencode took and pigeond could not record (``kill -9`` between the 2xx and
the commit, or during opencode's handling of the call) used to be sent again at the
restart: the message twice in the target's transcript, a second LLM turn.  So the
arbiter commits the intent before the call (:meth:`HandOffRecovery.record`; under load
every target's intent shares one commit, as their hand-off records do, see
:mod:`pigeond.delivery.grouping`), and every outcome of the call clears it.  A queued
message that still carries it is *in doubt*, and nothing goes to its target until the
doubt is ended (:meth:`HandOffRecovery.settled`) the way the verifier looks for a
hand-off: a user text part of the target's transcript beginning with the envelope's
opening tag carrying its msg_id, in the target's transcript as its runtime reads it
(:class:`~pigeond.delivery.runtime.TranscriptSource`).
Found, it is handed off and verified without a new prompt; not found, it is sent again.

A transcript that cannot be read proves nothing: the messages in doubt are held, no
attempt spent, never sent on a guess: until opencode answers again when it is unreachable
(:mod:`pigeond.delivery.reachability`), else for ``outage_retry_s``.  A transcript
read just after the intent (a fast restart) may not show yet a prompt opencode is still
taking in, so "not found" counts only once :data:`SETTLE_S` have passed since the intent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from pigeond.delivery.failures import HandOffError
from pigeond.delivery.grouping import Grouped
from pigeond.delivery.opencode_transcript import RECENT_MESSAGES
from pigeond.delivery.runtime import TranscriptSource
from pigeond.model import Runtime, StoredMessage, runtime_of
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database
from pigeond.storage.write_marks import urgent

log = Logger(namespace="pigeond.delivery.arbiter")  # one story in the logs with the arbiter's

# How long after its intent a prompt missing from the transcript may still be on its way
# into it: opencode writes the user message as it takes the call, in milliseconds; a
# restart takes longer than this anyway, so only a check made at once ever waits.
SETTLE_S: Final = 3.0


@dataclass(frozen=True, slots=True)
class IntentRecord:
    """One prompt about to go: its messages, and when."""

    msg_ids: tuple[str, ...]
    now_ms: int


@urgent  # the hand-off waits on it: before queued bookkeeping
def record_intents(repo: SwarmRepository, records: Sequence[IntentRecord]) -> list[list[str]]:
    """Every record's intent in one transaction and one commit."""
    return repo.mark_handoff_intents([(r.msg_ids, r.now_ms) for r in records])


def in_doubt(messages: Sequence[StoredMessage]) -> list[StoredMessage]:
    """The queued messages whose last hand-off's outcome was never recorded."""
    return [m for m in messages if m.handoff_intent_at is not None]


class HandOffRecovery:
    """The arbiter's intent writes, and the transcript checks that end a doubt."""

    def __init__(
        self,
        db: Database,
        transcripts: Callable[[str], TranscriptSource | None] | None,
        clock: IReactorTime,
        *,
        opencode_down: Callable[[], bool] = lambda: False,
        wait_for_opencode: Callable[[str], None] = lambda target: None,
    ) -> None:
        """``transcripts`` gives a target's transcript as its runtime reads it.  None (or
        None for a target): nothing can be looked up, a message in doubt is sent again (at
        least once, as before intents; only tests that never crash pass None).
        ``opencode_down``: an outage of opencode is under way; a doubt it leaves is due
        again at once, and its target is given to ``wait_for_opencode`` (the arbiter tries
        it again when the outage ends)."""
        self._db = db
        self._opencode_down = opencode_down
        self._wait_for_opencode = wait_for_opencode
        self._transcripts = transcripts
        self._clock = clock
        self._writes: Grouped[IntentRecord, list[str]] = Grouped(
            lambda records: db.write(record_intents, records)
        )

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    async def record(
        self, batch: list[StoredMessage], texts: list[str]
    ) -> tuple[list[StoredMessage], list[str]]:
        """Commit the intent to hand off ``batch``; returns the messages (and their texts)
        that are still queued, the only ones to send."""
        ids = tuple(m.msg_id for m in batch)
        marked = set(await self._writes(IntentRecord(ids, self._now_ms())))
        kept = [(m, t) for m, t in zip(batch, texts, strict=True) if m.msg_id in marked]
        return [m for m, _ in kept], [t for _, t in kept]

    async def settled(
        self,
        target: str,
        due: list[StoredMessage],
        read_again: Callable[[], Awaitable[list[StoredMessage]]],
        hold_s: float,
    ) -> list[StoredMessage]:
        """``due`` (the head of ``target``'s queue) once none of it is in doubt: the doubt
        is ended from the transcript and the queue read again.  Empty while the doubt
        holds (the transcript cannot be read, or it is too soon to tell)."""
        while in_doubt(due):
            if not await self._settle(target, in_doubt(due), hold_s):
                return []
            due = await read_again()
        return due

    async def _settle(self, target: str, doubtful: list[StoredMessage], hold_s: float) -> bool:
        """Look for ``doubtful`` in the transcript and record what it says; False when they
        stay in doubt, held (in the database) until they can be looked for again."""
        ids = [m.msg_id for m in doubtful]
        try:
            found = await self._find(target, doubtful)
        except HandOffError as e:
            waits_for_opencode = self._opencode_down() and runtime_of(target) is Runtime.OPENCODE
            if waits_for_opencode:
                self._wait_for_opencode(target)
            until = self._now_ms() + (0 if waits_for_opencode else int(hold_s * 1000))
            reason = (
                f"in doubt (its hand-off's outcome was not recorded) and {target}'s transcript"
                f" cannot be read to tell: {e}; not sent again until it can"
            )
            await self._db.write(
                SwarmRepository.settle_intents, [], ids, self._now_ms(),
                missing_until=until, reason=reason,
            )  # fmt: skip
            log.info("{msg_ids} to {target} in doubt; transcript unreadable ({error});"
                     " holding them {hold}, no attempt spent", msg_ids=ids, target=target,
                     error=str(e), hold="until opencode answers" if waits_for_opencode
                     else f"{hold_s:g} s")  # fmt: skip
            return False
        now_ms = self._now_ms()
        missing = [m for m in doubtful if m.msg_id not in found]
        settle_at = max((m.handoff_intent_at or 0 for m in missing), default=0)
        settle_at += int(SETTLE_S * 1000)
        too_soon = bool(missing) and now_ms < settle_at and self._source(target) is not None
        recorded = await self._db.write(
            SwarmRepository.settle_intents,
            [m.msg_id for m in doubtful if m.msg_id in found], [m.msg_id for m in missing],
            now_ms, missing_until=settle_at if too_soon else None,
            reason="in doubt: not in the transcript yet, looked for again"
            if too_soon else "not in the transcript after a hand-off whose outcome was"
            " not recorded; sent again",
        )  # fmt: skip
        for msg_id in recorded:
            log.info("{msg_id} to {target} found in the transcript after a hand-off whose"
                     " outcome was not recorded; handed off and verified, not sent again",
                     msg_id=msg_id, target=target)  # fmt: skip
        if missing:
            log.info("{msg_ids} to {target}: not in the transcript after a hand-off whose"
                     " outcome was not recorded; {next}", msg_ids=[m.msg_id for m in missing],
                     target=target, next="looked for again in a moment" if too_soon
                     else "sending again")  # fmt: skip
        return not too_soon

    def _source(self, target: str) -> TranscriptSource | None:
        return self._transcripts(target) if self._transcripts is not None else None

    async def _find(self, target: str, doubtful: list[StoredMessage]) -> set[str]:
        """The msg_ids of ``doubtful`` in the transcript: the newest messages first, the
        whole transcript when some are not among them.  A session its runtime does not have
        holds none of them (sent again, its 404 fails them as usual)."""
        source = self._source(target)
        if source is None:
            return set()
        wanted = {m.msg_id for m in doubtful}
        transcript = await source.read(target, max(RECENT_MESSAGES, 4 * len(doubtful)))
        found = set(transcript.homes) & wanted
        if found != wanted and not transcript.complete:
            transcript = await source.read(target, None)
            found = set(transcript.homes) & wanted
        return found
