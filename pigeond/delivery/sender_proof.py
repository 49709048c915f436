"""The sender-proof job: who really sent each message an agent's tool claims to have sent.

A send by an agent's pigeond tool is stored ``pending`` (pigeond/api/sender_claims.py) and
is not handed off until it settles.  This job, off the accept path, reads the claimed
sender's own transcript (a :class:`~pigeond.tool_calls.ToolCallReader`) and looks for the
call that made the message:

- opencode: a ``swarm_send`` call whose id gives the message's msg_id
  (:func:`~pigeond.tool_calls.plugin_msg_id`), with the same payload and target;
- Claude Code: a ``swarm_send`` ``tool_use`` with the same payload and target that
  verified no other message (the storage refuses a call used twice).

Found: ``verified``.  The reader has no transcript of the sender: ``unverified`` at once.
Not found, or the transcript unreadable: tried again, backing off, until
``sender_proof_timeout_s`` after the accept, then ``unverified`` with the reason.  Nothing
is lost either way: the message goes on, marked.  The work of one tick is bounded
(:data:`MAX_PER_TICK` messages, one transcript read per sender), and a restart finds the
pending messages in the database again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from pigeond.config import Config
from pigeond.model import Runtime, SenderProof, StoredMessage, runtime_of
from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.database import Database
from pigeond.tool_calls import ToolCall, ToolCallReader, TranscriptUnreadable, plugin_msg_id

# Pending messages looked at per tick, oldest first.
MAX_PER_TICK = 64
# Seconds between two looks for one message (then the last again), within its deadline.
RETRY_AFTER_S: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)
SEND_TOOL = "swarm_send"

log = Logger()


def made_by(call: ToolCall, message: StoredMessage) -> bool:
    """Whether ``call`` (of the message's claimed sender) is the call that sent
    ``message``: the send tool, the same payload, the same target, and for opencode the
    call whose id the plugin derived the msg_id from."""
    if call.tool != SEND_TOOL or call.input.get("payload") != message.payload:
        return False
    if message.channel is not None:
        if call.input.get("channel") != message.channel:
            return False
    elif call.input.get("to") not in _targets(message):
        return False
    if runtime_of(message.from_session) is Runtime.OPENCODE:
        return plugin_msg_id(message.from_session, call.call_id) == message.msg_id
    return True


def _targets(message: StoredMessage) -> tuple[str, ...]:
    """How the send may have named its target: the session, or ``@`` and its name."""
    named = () if message.to_name is None else (f"@{message.to_name}",)
    return (message.to_session or "", *named)


@dataclass
class _Retry:
    tries: int
    not_before_ms: int


class SenderProofJob:
    """Settles the pending proofs: a periodic job (its tick on the daemon's clock), also
    kicked soon after an accept."""

    def __init__(
        self,
        db: Database,
        reader: ToolCallReader,
        clock: IReactorTime,
        config: Config,
        on_settled: Callable[[str], None] = lambda target: None,
        mine: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        """``on_settled`` is told each target whose queue a settled proof made due (the
        arbiter's kick).  ``mine`` (daemons sharing a PostgreSQL database: the routing's)
        says whether this daemon's opencode has a session: a sender another daemon's
        opencode has is left to that daemon, and settled here only at its deadline."""
        self._mine = mine
        self._db = db
        self.reader = reader
        self._clock = clock
        self._on_settled = on_settled
        self._retries: dict[str, _Retry] = {}
        self._running: Deferred[None] | None = None
        self._again = False  # kicked while a tick ran: tick once more after it
        self._soon: IDelayedCall | None = None
        self._last_error: str | None = None
        self.configure(config)

    def configure(self, config: Config) -> None:
        self.timeout_ms = int(config.sender_proof_timeout_s * 1000)

    def _now_ms(self) -> int:
        # rounded, not cut: a timer set for the deadline fires at it, not a millisecond short
        return round(self._clock.seconds() * 1000)

    def kick(self, target: str | None = None) -> None:
        """A send was accepted: look soon (on the next turn of the reactor, not inside the
        send's own handler)."""
        if self._soon is None or not self._soon.active():
            self._soon = self._clock.callLater(0, self.tick)

    def tick(self) -> Deferred[None]:
        """One pass; never fails (what fails is said here, once, not by the tick)."""
        if self._running is not None and not self._running.called:
            self._again = True
            return self._running
        self._running = Deferred.fromCoroutine(self._ticks())
        return self._running

    async def _ticks(self) -> None:
        again = True
        while again:
            self._again = False
            await self._tick()
            again = self._again

    async def _tick(self) -> None:
        try:
            pending = await self._db.read(SwarmRepository.pending_proofs, MAX_PER_TICK)
            now_ms = self._now_ms()
            self._retries = {m.msg_id: r for m in pending if (r := self._retries.get(m.msg_id))}
            senders: dict[str, list[StoredMessage]] = defaultdict(list)
            for message in pending:
                retry = self._retries.get(message.msg_id)
                due = retry is None or retry.not_before_ms <= now_ms
                if due or now_ms >= self._deadline(message):
                    senders[message.from_session].append(message)
            for sender, messages in senders.items():
                await self._settle_sender(sender, messages)
        except StorageError as e:
            if str(e) != self._last_error:
                log.error("sender proofs: {error}; trying again every tick", error=str(e))
            self._last_error = str(e)
            return
        except Exception:
            log.failure("sender proofs failed; trying again next tick")
            return
        self._last_error = None

    def _deadline(self, message: StoredMessage) -> int:
        return message.created_at + self.timeout_ms

    async def _settle_sender(self, sender: str, messages: Sequence[StoredMessage]) -> None:
        """Read ``sender``'s recent calls once, and settle or retry each of its messages."""
        unreadable: str | None = None
        calls: Sequence[ToolCall] | None = ()
        try:
            if self._mine is not None and not await self._mine(sender):
                unreadable = "this daemon's opencode does not have it"
            else:
                calls = await self.reader.recent_calls(sender)
        except TranscriptUnreadable as e:
            unreadable = str(e) or "unreadable"
        except Exception as e:  # a reader's bug must not stop the others: as unreadable
            log.failure("reading {sender}'s transcript for sender proofs", sender=sender)
            unreadable = f"{type(e).__name__}"
        for message in messages:
            if calls is None:
                note = f"{sender} has no transcript pigeond can read"
                await self._settle(message, SenderProof.UNVERIFIED, note)
            elif unreadable is None and await self._verified_by(message, calls):
                continue
            elif self._now_ms() >= self._deadline(message):
                timeout_s = self.timeout_ms / 1000
                note = (
                    f"{sender}'s transcript could not be read within {timeout_s:g} s ({unreadable})"
                    if unreadable is not None
                    else f"no {SEND_TOOL} call for this message in {sender}'s recent transcript"
                )
                await self._settle(message, SenderProof.UNVERIFIED, note)
            else:
                self._retry_later(message)

    async def _verified_by(self, message: StoredMessage, calls: Sequence[ToolCall]) -> bool:
        """Settle ``message`` verified by the first matching call not used already."""
        for call in calls:
            if made_by(call, message):
                sender = message.from_session
                note = f"{SEND_TOOL} call {call.call_id} found in {sender}'s transcript"
                if await self._settle(message, SenderProof.VERIFIED, note, call.call_id):
                    return True
        return False

    async def _settle(
        self, message: StoredMessage, proof: SenderProof, note: str, call_id: str | None = None
    ) -> bool:
        settled = await self._db.write(
            SwarmRepository.settle_proof, message.msg_id, proof, note, self._now_ms(), call_id
        )
        if not settled.written:
            return False
        self._retries.pop(message.msg_id, None)
        log.info("{msg_id}: sender {sender} {proof}: {note}", msg_id=message.msg_id,
                 sender=message.from_session, proof=proof.value, note=note)  # fmt: skip
        for target in settled.due_targets:
            self._on_settled(target)
        return True

    def _retry_later(self, message: StoredMessage) -> None:
        retry = self._retries.get(message.msg_id) or _Retry(0, 0)
        delay_s = RETRY_AFTER_S[min(retry.tries, len(RETRY_AFTER_S) - 1)]
        not_before = min(self._now_ms() + int(delay_s * 1000), self._deadline(message))
        self._retries[message.msg_id] = _Retry(retry.tries + 1, not_before)
        # come back at the next try even between ticks (the deadline included)
        self._clock.callLater(max(not_before - self._now_ms(), 0) / 1000, self.kick)
