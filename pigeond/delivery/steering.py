"""Steering: which batches go into a session's running turn, and how a drain waiting
after a hand-off hears of one.

A batch *steers* (:class:`~pigeond.delivery.runtime.Delivery` STEER) only on a runtime
that ``steers`` (opencode 2.x), and only when every message of it is urgent and asked to
steer, and the target's policy allows steering when the batch is handed off (read then,
from the database: the truth, whatever the daemon's copy says).  Anything else is queued:
a turn of its own after the running one.  One exception: a retry of a batch the server may
already hold (its admission answered, or not answered in time) goes as it went the first
time, since opencode binds an admission's id to its body
(:mod:`pigeond.delivery.opencode_v2_runtime`); a batch that surely never reached it
goes as the policy says at its retry.  So that the two never share a batch, a drain on
such a runtime cuts its batch where the messages stop asking what its head asks
(:func:`same_ask`); other runtimes' batches are formed as they always were.

pigeond still sends one batch at a time and waits, after each, until the session is idle.
A steering batch would be pointless behind that wait: it is meant for the running turn.
So while a drain waits after a hand-off, each kick of its target (a send, a requeue, the
tick: :class:`Kicks`) makes it look at its queue's head, and a head that would steer ends
the wait; the steer goes at once, into the turn still running.
"""

from __future__ import annotations

from collections.abc import Sequence

from twisted.internet.defer import Deferred

from pigeond.model import STEER_PRIORITY, StoredMessage
from pigeond.storage import SwarmRepository


def steering_allowed(repo: SwarmRepository, target: str) -> bool:
    """Whether ``target``'s stored policy allows steering now."""
    return repo.policy_of(target).steer


def asks_to_steer(message: StoredMessage) -> bool:
    """Whether its sender asked that it steer (urgent only: the send path saw to it)."""
    return message.steer and message.priority == STEER_PRIORITY


def same_ask(
    messages: Sequence[StoredMessage], texts: Sequence[str]
) -> tuple[list[StoredMessage], list[str], bool]:
    """The head of a batch whose messages all ask what its first asks, their envelopes,
    and whether that is to steer."""
    if not messages:
        return [], [], False
    steer = asks_to_steer(messages[0])
    count = next((i for i, m in enumerate(messages) if asks_to_steer(m) != steer), len(messages))
    return list(messages[:count]), list(texts[:count]), steer


class Kicks:
    """A Deferred per target that fires at its next kick, for a drain waiting after a
    hand-off on a runtime that steers."""

    def __init__(self) -> None:
        self._waiting: dict[str, Deferred[None]] = {}

    def next(self, target: str) -> Deferred[None]:
        """Fires at ``target``'s next kick (the same Deferred until then)."""
        waiting = self._waiting.get(target)
        if waiting is None:
            waiting = self._waiting[target] = Deferred()
        return waiting

    def kicked(self, target: str) -> None:
        waiting = self._waiting.pop(target, None)
        if waiting is not None:
            waiting.callback(None)

    def forget(self, target: str) -> None:
        """The drain no longer waits: nothing fires for it."""
        self._waiting.pop(target, None)
