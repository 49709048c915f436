"""One call to opencode under its deadline, and what its failure is.

The deadline covers the whole exchange (connect, headers and body): a server that
accepts the connection and then hangs must not hold a target's delivery slot forever.
A failure is classified as the arbiter needs it (:mod:`pigeond.delivery.opencode_errors`):
no answer in time is :class:`~pigeond.delivery.opencode_errors.DeadlineExceeded` (of the
kind the caller says: a read that got none delivered nothing, a prompt may have been
taken); no connection, or one closed before any answer, an outage; anything else an
attempt.  A call its caller cancels (the 2.x wait a steer ends, a stop) is a cancel, not
a deadline passed.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from twisted.internet.defer import CancelledError, Deferred, TimeoutError
from twisted.internet.interfaces import IReactorTime

from pigeond.delivery.failures import FailureKind
from pigeond.delivery.opencode_errors import (
    CLOSED_BEFORE_ANSWER,
    CONNECTION_GONE,
    DeadlineExceeded,
    OpencodeError,
    describe_transport_error,
)

T = TypeVar("T")


async def within_deadline(
    what: str,
    work: Coroutine[Any, Any, T],
    clock: IReactorTime,
    timeout_s: float,
    timeout_kind: FailureKind = FailureKind.ATTEMPT,
) -> T:
    """What ``work`` (the call ``what``) gives within ``timeout_s`` on ``clock``; else
    OpencodeError (DeadlineExceeded of ``timeout_kind`` when the time ran out), or
    CancelledError when the caller cancelled it."""
    timed_out = False
    cancelled = False

    def on_timeout(result: object, timeout: float) -> object:
        nonlocal timed_out
        timed_out = True
        return result

    def caller_cancels(_: Deferred[T]) -> None:
        nonlocal cancelled
        cancelled = True
        d.cancel()

    d: Deferred[T] = Deferred.fromCoroutine(work)
    d.addTimeout(timeout_s, clock, onTimeoutCancel=on_timeout)
    answer: Deferred[T] = Deferred(caller_cancels)
    d.chainDeferred(answer)
    try:
        return await answer
    except OpencodeError:
        raise
    except Exception as e:
        if cancelled and not timed_out:
            raise CancelledError() from e  # its caller gave up on it: no deadline passed
        if timed_out or isinstance(e, TimeoutError | CancelledError):
            raise DeadlineExceeded(
                f"{what}: no complete answer within {timeout_s:g} s", kind=timeout_kind
            ) from e
        kind = (
            FailureKind.OUTAGE
            if isinstance(e, CONNECTION_GONE + CLOSED_BEFORE_ANSWER)
            else FailureKind.ATTEMPT
        )
        raise OpencodeError(f"{what}: {describe_transport_error(e)}", kind=kind) from e
