"""Group commit: sends that arrive close together share one transaction and one fsync.

Every 202 waits for the commit that holds its row (``synchronous=FULL`` stays), so a
commit per send makes the disk's fsync rate the ceiling on sends.  Here a send joins a
queue; the writer thread takes *everything* queued when it gets to it and stores it
with :meth:`SwarmRepository.accept_many`, in order, in one transaction.  A send that
comes while a group commits waits for the next group, so groups grow with the load and
an idle daemon still commits each send alone at once, adding no delay.

Idempotency stays exact inside a group (a msg_id twice: the second is DUPLICATE or
CONFLICT as if they came apart), and a failed commit fails every send of its group
with the StorageUnavailable (a 503) it would have got alone: nothing is half-stored.
"""

from __future__ import annotations

from collections import deque

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from pigeond.storage.repository import Accept, AcceptOutcome, SwarmRepository
from pigeond.storage.write_queue import WriteQueue

log = Logger()

Settled = list[tuple[Deferred[AcceptOutcome], AcceptOutcome | Failure]]


class GroupCommit:
    """Accepts on ``writer`` through the writer thread's queue, grouped as they queue up."""

    def __init__(self, writes: WriteQueue, writer: SwarmRepository) -> None:
        self._writes = writes
        self._writer = writer
        # appended on the reactor thread, emptied on the writer thread: deque's append
        # and popleft are thread-safe
        self._waiting: deque[tuple[Accept, Deferred[AcceptOutcome]]] = deque()
        self._committing = False  # read and written on the reactor thread only
        self.groups = 0  # commits made, for tests and metrics
        self.largest_group = 0

    def accept(self, accept: Accept) -> Deferred[AcceptOutcome]:
        answer: Deferred[AcceptOutcome] = Deferred()
        self._waiting.append((accept, answer))
        if not self._committing:
            self._commit_next()
        return answer

    def _commit_next(self) -> None:
        self._committing = True
        # urgent: 202s wait on it (pigeond/storage/write_queue.py)
        self._writes.submit(True, self._commit_waiting).addCallbacks(self._settle, self._lost)

    def _commit_waiting(self) -> Settled:
        """On the writer thread: store everything queued now, in one transaction."""
        group: list[tuple[Accept, Deferred[AcceptOutcome]]] = []
        while self._waiting:
            group.append(self._waiting.popleft())
        if not group:
            return []
        answers = [answer for _, answer in group]
        try:
            outcomes = self._writer.accept_many([accept for accept, _ in group])
        except Exception:
            failure = Failure()
            return [(answer, failure) for answer in answers]
        self.groups += 1
        self.largest_group = max(self.largest_group, len(group))
        return list(zip(answers, outcomes, strict=True))

    def _settle(self, settled: Settled) -> None:
        """On the reactor thread: answer the group, then start the next one if any came."""
        self._committing = False
        for answer, outcome in settled:
            if isinstance(outcome, Failure):
                answer.errback(outcome)
            else:
                answer.callback(outcome)
        if self._waiting:
            self._commit_next()

    def _lost(self, failure: Failure) -> None:
        """The job itself failed (it catches every error of the commit): a bug of ours.
        What was waiting fails with it rather than wait for ever."""
        self._committing = False
        log.failure("group commit failed", failure)
        while self._waiting:
            _, answer = self._waiting.popleft()
            answer.errback(failure)
