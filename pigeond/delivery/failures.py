"""How a hand-off can fail, whatever the runtime, and how the arbiter treats each kind.

Every runtime (:mod:`pigeond.delivery.runtime`) raises a :class:`HandOffError` with a
:class:`FailureKind`; the drain and :func:`~pigeond.delivery.policy.decide_retry` know
nothing else of it: an outage spends no attempt, a permanent error fails at once,
anything else spends an attempt and backs off.
"""

from __future__ import annotations

from enum import Enum


class FailureKind(Enum):
    # the runtime unreachable, or not usable for this target now: no attempt spent; held
    # until it answers again (see reachability) or for outage_retry_s
    OUTAGE = "outage"
    PERMANENT = "permanent"  # retrying cannot help: fail at once
    ATTEMPT = "attempt"  # anything else: spend an attempt, back off
    # a pull runtime's session stopped waiting before the batch was given to it: nothing
    # reached it, so nothing is spent and nothing held; it goes at the session's next ask
    NOT_TAKEN = "not_taken"


class HandOffError(Exception):
    """A hand-off did not succeed; the text is what operators see in ``last_error``."""

    def __init__(
        self, message: str, status: int | None = None, kind: FailureKind = FailureKind.ATTEMPT
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
