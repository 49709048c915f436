"""What can go wrong in a call to ``opencode serve``, and how the arbiter treats each.

Every failure of :class:`~pigeond.delivery.opencode_client.OpencodeClient` is an
:class:`OpencodeError` with a :class:`FailureKind`: an outage spends no attempt, a
permanent error fails at once, anything else spends an attempt and backs off.  The
transport errors that mean no answer came at all are named here too, for the client and
for :mod:`pigeond.delivery.reachability`'s view of an outage.
"""

from __future__ import annotations

from twisted.internet import error as neterror
from twisted.internet.defer import CancelledError
from twisted.python.failure import Failure
from twisted.web.client import RequestTransmissionFailed, ResponseNeverReceived

from pigeond.delivery.failures import FailureKind, HandOffError

MAX_ERROR_TEXT = 300
OUTAGE_STATUSES = frozenset({401, 403, 502, 503, 504})
# The connection died before any answer: opencode is down or restarting, or a
# pooled keep-alive connection had been closed by the server.
CONNECTION_GONE = (
    neterror.ConnectError,
    neterror.DNSLookupError,
    neterror.ConnectingCancelledError,
)
CLOSED_BEFORE_ANSWER = (ResponseNeverReceived, RequestTransmissionFailed)


class OpencodeError(HandOffError):
    """A call to opencode did not succeed; the text is what operators see in ``last_error``."""


class DeadlineExceeded(OpencodeError):
    """No complete answer within the deadline; never retried at once."""


class UnsupportedApi(OpencodeError):
    """opencode answers without its v1 routes (2.x?): held as an outage, never retried
    another way (see :mod:`pigeond.delivery.api_support`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind=FailureKind.OUTAGE)


class SpeaksV2(OpencodeError):
    """A 1.x call to an opencode found to be 2.x: nothing was sent (or its route was
    missing), and the caller speaks 2.x instead or stays quiet (see
    :mod:`pigeond.delivery.opencode_dialect`).  Held as an outage where it reaches a
    message."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind=FailureKind.OUTAGE)


class SessionNotFound(OpencodeError):
    """opencode answered 404 for the session: it does not exist (anymore)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 404, FailureKind.PERMANENT)


def short_text(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip().replace("\n", " ")
    return text if len(text) <= MAX_ERROR_TEXT else text[:MAX_ERROR_TEXT] + "…"


def describe_transport_error(error: BaseException) -> str:
    """One readable line for a transport error (ResponseFailed wraps its real reasons)."""
    reasons = getattr(error, "reasons", None)
    if isinstance(reasons, list) and reasons:
        inner = "; ".join(
            f"{type(r.value).__name__}: {r.getErrorMessage()}" if isinstance(r, Failure) else str(r)
            for r in reasons
        )
        return f"{type(error).__name__} ({inner})"
    return f"{type(error).__name__}: {error}"


def was_cancelled(error: BaseException | None) -> bool:
    """A request we cancelled ourselves (shutdown), not one the server dropped."""
    reasons = getattr(error, "reasons", None) or []
    return any(isinstance(r, Failure) and r.check(CancelledError) for r in reasons)


def status_text(what: str, status: int) -> str:
    """``what: HTTP status``, and for a 401 what to do about it."""
    if status == 401:
        return (
            f"{what}: HTTP 401: opencode asks for a password pigeond does not have or has"
            " wrong (opencode_password_file, OPENCODE_PASSWORD, OPENCODE_SERVER_PASSWORD)"
        )
    return f"{what}: HTTP {status}"


def status_error(what: str, status: int, body: bytes) -> OpencodeError:
    if status == 401:
        return OpencodeError(status_text(what, status), status, FailureKind.OUTAGE)
    if status in OUTAGE_STATUSES:
        kind = FailureKind.OUTAGE
    elif status == 400:
        kind = FailureKind.PERMANENT
    else:
        kind = FailureKind.ATTEMPT
    return OpencodeError(f"{what}: HTTP {status}: {short_text(body)}", status, kind)
