"""Checking that handed-off messages really reached their target's transcript.

opencode answers 204 even when no turn starts (an unknown agent, a deleted
directory), so a 2xx is not proof.  A hand-off is *verified* once a user text
part in ``GET /session/<id>/message`` begins with the envelope's opening tag
carrying its msg_id; a payload that merely mentions the id does not count,
because the payload is escaped and can never begin a part with a tag.  A
message still missing after the grace period goes back to the queue (at most
``max_requeues`` times), then fails.

The same reads record what each hand-off's turn used (tokens, cost: :mod:`pigeond.costs`)
once the turn has ended, one turn row per turn (a turn read again is not counted again).
The same reads carry the receipt chain to its end: a seen message is *answered* once the
turn that consumed it ended with the assistant's reply (:mod:`pigeond.delivery.answers`).
Those looks are bounded, or an unanswered message would cost its target a transcript
read every interval forever: a message is looked for only ``turn_timeout_s`` after it was
seen (pigeond already takes a turn running longer as over, and goes ahead), and, while
the event stream runs, only after a turn of its target ended since the last look (an
answer is written when a turn ends), and every interval for ``TURN_END_SETTLE_S`` after a
look saw a new turn end; while the stream is down, every interval.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pigeond.config import Config
from pigeond.costs import EndedTurn
from pigeond.delivery.failures import HandOffError
from pigeond.delivery.opencode_transcript import RECENT_MESSAGES
from pigeond.delivery.routing import Routing
from pigeond.delivery.runtime import TranscriptSource, TranscriptView
from pigeond.delivery.turns import TurnCount
from pigeond.model import Runtime, StoredMessage, runtime_of
from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.database import Database

log = Logger()

# Transcripts read at once.  Every target with hand-offs falls due in the same tick, so
# unbounded, a hundred targets meant a hundred transcripts (and their unverified rows)
# in memory together every interval: a burst that delayed hand-offs and set the
# process's memory high-water mark.  The rest wait their turn, each started as one ends.
CHECKS_AT_ONCE = 4
# A turn's end is told before its transcript holds all of it: Claude Code runs its Stop
# hook and only then flushes the turn's last entries (seen 0.3 s after the hook on a
# loaded machine).  A look that saw a new turn end may read too early; answers are looked
# for again every interval this long after it, not only after the next turn end.
TURN_END_SETTLE_S = 5.0


def _targets(repo: SwarmRepository, since_ms: int) -> tuple[list[str], list[str]]:
    """Targets with hand-offs not seen yet, and with seen messages awaiting an answer."""
    return repo.verification_targets(), repo.unanswered_targets(since_ms)


def _awaiting(
    repo: SwarmRepository, target: str, since_ms: int
) -> tuple[list[StoredMessage], list[StoredMessage]]:
    """``target``'s hand-offs not seen yet, and its seen messages awaiting an answer."""
    return repo.awaiting_verification(target), repo.awaiting_answer(target, since_ms)


class Verifier:
    def __init__(
        self,
        db: Database,
        transcripts: Callable[[str], TranscriptSource | None],
        clock: IReactorTime,
        config: Config,
        *,
        on_requeued: Callable[[str], None] = lambda target: None,
        turns_ended: Callable[[str], TurnCount | None] = lambda target: None,
        routing: Routing | None = None,
        opencode_down: Callable[[], bool] = lambda: False,
    ) -> None:
        """``transcripts`` gives each target's transcript, as its runtime reads it (None: a
        runtime whose hand-offs are seen when made).
        ``config`` gives ``verify_interval_s``, ``max_requeues`` and ``turn_timeout_s``;
        ``turns_ended`` (:meth:`~pigeond.delivery.turns.TurnTracker.turns_ended`) changes
        when a target's turn may have ended (None: it cannot tell).  ``routing`` leaves the
        targets of another daemon's opencode (a database shared by several) to it.  While
        ``opencode_down`` (an outage of opencode, probed elsewhere) no opencode target is
        checked: no transcript can be read; a hand-off overdue meanwhile is looked for in
        the whole transcript once opencode answers."""
        self._routing = routing
        self._opencode_down = opencode_down
        self._listing_error: str | None = None  # the last listing failure, said once
        self._db = db
        self._transcripts = transcripts
        self._clock = clock
        self.configure(config)
        self._on_requeued = on_requeued
        self._turns_ended = turns_ended
        self._turns_at_look: dict[str, TurnCount | None] = {}  # when answers were looked for
        self._new_turn_end_at: dict[str, float] = {}  # when a look first saw that count
        # target → msg_id → the user message its envelope came in, for the seen messages
        # awaiting an answer: a long turn can push that message out of the newest ones read
        self._homes: dict[str, dict[str, str]] = {}
        self._closed = False
        self._checking: dict[str, Deferred[None]] = {}
        self._waiting: deque[str] = deque()  # due targets waiting for one of CHECKS_AT_ONCE
        self._last_check: dict[str, float] = {}
        self._listing: Deferred[None] | None = None

    def configure(self, config: Config) -> None:
        """A reload's settings, from the next check on."""
        self._interval_s = config.verify_interval_s
        self._max_requeues = config.max_requeues
        self._answer_window_ms = int(config.turn_timeout_s * 1000)

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    def _answers_since_ms(self) -> int:
        """Seen messages seen before this are no longer looked at for an answer."""
        return self._now_ms() - self._answer_window_ms

    def tick(self) -> None:
        """Start a check for each target with unverified hand-offs, and for each with seen
        messages awaiting an answer whose turn may have ended, at most once per interval;
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
            # a database down fails every tick: said once per new error, not every tick
            if self._listing_error != str(failure.value):
                log.error("cannot list hand-offs to verify yet: {error}; trying again every"
                          " tick", error=str(failure.value))  # fmt: skip
            self._listing_error = str(failure.value)
        else:
            log.failure("listing hand-offs to verify failed", failure)

    async def _check_targets(self) -> None:
        unseen, unanswered = await self._db.read(_targets, self._answers_since_ms())
        self._listing_error = None  # the database answers again: a next failure is told
        now = self._clock.seconds()
        listed = {*unseen, *unanswered}
        for forget in (self._turns_at_look, self._homes, self._new_turn_end_at):
            for gone in [target for target in forget if target not in listed]:
                del forget[gone]
        unseen_set = set(unseen)
        answers_only = [t for t in unanswered if t not in unseen_set and self._turn_ended(t)]
        for target in [*unseen, *answers_only]:
            if target in self._checking or now - self._last_check.get(target, 0) < self._interval_s:
                continue
            if self._cannot_read_now(target):
                continue
            self._last_check[target] = now
            if target not in self._waiting:
                self._waiting.append(target)
        self._start_checks()

    def check_soon(self, target: str) -> None:
        """A turn of ``target`` just ended (a Claude Code session's Stop hook): look in its
        transcript now, ahead of the targets waiting, not at the next interval."""
        if target in self._checking or self.is_closed():
            return
        self._last_check[target] = self._clock.seconds()
        if target in self._waiting:
            self._waiting.remove(target)
        self._waiting.appendleft(target)
        self._start_checks()

    def _turn_ended(self, target: str) -> bool:
        """Whether a turn of ``target`` may have ended since its answers were last looked
        for (always, when that cannot be told)."""
        ended = self._turns_ended(target)
        if ended is None or target not in self._turns_at_look:
            return True
        settling = self._clock.seconds() - self._new_turn_end_at.get(target, -TURN_END_SETTLE_S)
        return ended != self._turns_at_look[target] or settling < TURN_END_SETTLE_S

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

    def _cannot_read_now(self, target: str) -> bool:
        """An opencode target while opencode is out (its outage is probed elsewhere)."""
        return self._opencode_down() and runtime_of(target) is Runtime.OPENCODE

    async def check(self, target: str) -> None:
        source = self._transcripts(target)
        if self.is_closed() or source is None or self._cannot_read_now(target):
            return
        if self._routing is not None:
            try:
                ours = await self._routing.mine(target)
            except StorageError:
                self._look_again(target)
                return
            if not ours:
                return  # its transcript is in another daemon's opencode
        # taken before the read: a turn that ends while it runs is looked at again
        ended = self._turns_ended(target)
        if ended is not None and self._turns_at_look.get(target) != ended:
            self._new_turn_end_at[target] = self._clock.seconds()
        self._turns_at_look[target] = ended
        try:
            waiting, unanswered = await self._db.read(_awaiting, target, self._answers_since_ms())
        except StorageError as e:
            log.error("cannot read {target}'s hand-offs to verify yet: {error}",
                      target=target, error=str(e))  # fmt: skip
            self._look_again(target)
            return
        if not waiting and not unanswered:
            return
        now_ms = self._now_ms()
        overdue = any(m.verify_by is not None and m.verify_by <= now_ms for m in waiting)
        # the newest messages first; the whole transcript only before giving up
        # (an answer is among the newest: the turn that wrote it ended last)
        limit = None if overdue else max(RECENT_MESSAGES, 4 * len(waiting) + 2 * len(unanswered))
        try:
            transcript = await source.read(target, limit)
        except HandOffError as e:
            said = log.debug if self._cannot_read_now(target) else log.info  # logged once
            said("cannot read {target}'s transcript yet: {error}", target=target, error=str(e))
            self._look_again(target)
            return
        homes = dict(transcript.homes)
        if self.is_closed():
            return  # the database closed while the transcript was read (shutdown)
        try:
            await self._record(target, waiting, unanswered, transcript, homes, source)
        except StorageError as e:
            # a full or locked disk: nothing is lost, the same check runs again next interval
            log.error("cannot record what {target}'s transcript shows yet: {error}",
                      target=target, error=str(e))  # fmt: skip
            self._look_again(target)

    def _look_again(self, target: str) -> None:
        """A look that could not finish: the next interval looks for answers again, even
        if no turn ends meanwhile."""
        self._turns_at_look.pop(target, None)

    def close(self) -> None:
        """The database is about to close: a check that ends later writes nothing."""
        self._closed = True

    def is_closed(self) -> bool:
        return self._closed

    async def _record(
        self, target: str, waiting: list[StoredMessage], unanswered: list[StoredMessage],
        transcript: TranscriptView, homes: Mapping[str, str | None], source: TranscriptSource,
    ) -> None:  # fmt: skip
        """Record what ``transcript`` shows, in one write (storage/looks.py): the hand-offs
        of ``waiting`` seen now, the ended turns that consumed the seen messages, and the
        answers to them; remember where the unanswered envelopes are for the next look;
        then requeue (or fail) the overdue rest of ``waiting``."""
        found = [m.msg_id for m in waiting if m.msg_id in homes]
        known = self._homes.get(target, {})
        awaiting = [*(m.msg_id for m in unanswered), *found]
        where = {m: h for m in awaiting if (h := homes.get(m) or known.get(m)) is not None}
        turns = await self._ended_turns(target, where, transcript, source)
        answers = transcript.answers(where)
        now_ms = self._now_ms()
        look = await self._db.write(
            SwarmRepository.record_look, target, found, turns, answers, now_ms
        )
        for msg_id in look.verified:
            log.info("verified {msg_id} in {target}'s transcript", msg_id=msg_id, target=target)
        for turn in look.turns:
            log.debug("{target}'s turn {key} for {msg_ids} used {tokens} tokens",
                      target=target, key=turn.key, msg_ids=", ".join(turn.msg_ids),
                      tokens=turn.usage.tokens)  # fmt: skip
        for msg_id in look.answered:
            log.info("{msg_id} answered in {target}'s transcript by {answer}",
                     msg_id=msg_id, target=target, answer=answers[msg_id])  # fmt: skip
        self._homes[target] = {m: h for m, h in where.items() if m not in answers}
        await self._requeue_overdue(target, waiting, homes, now_ms)

    async def _ended_turns(
        self, target: str, where: Mapping[str, str], transcript: TranscriptView,
        source: TranscriptSource,
    ) -> list[EndedTurn]:  # fmt: skip
        """The ended turns that consumed ``where``'s msg_ids, with their usage.  A turn
        longer than the newest messages read is counted from the whole transcript, read for
        it (once: it is recorded then); if that read fails, from what was read."""
        turns = transcript.turns(where)
        partial = [m for turn in turns if turn.partial for m in turn.msg_ids]
        if partial and not set(partial) <= await self._db.read(SwarmRepository.linked, partial):
            try:
                turns = (await source.read(target, None)).turns(where)
            except HandOffError as e:
                log.info("{target}'s long turn is counted from its newest steps only:"
                         " {error}", target=target, error=str(e))  # fmt: skip
        return turns

    async def _requeue_overdue(
        self, target: str, waiting: list[StoredMessage], found: Mapping[str, object],
        now_ms: int,
    ) -> None:  # fmt: skip
        """Requeue (or fail) the hand-offs of ``waiting`` not ``found`` past their time."""
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
