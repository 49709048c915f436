"""How hard, how often and how much the arbiter delivers: its settings, the backoff, what
follows a failed hand-off, and the byte bound of a batch.  Plain data and functions, so
they are tested alone (the retry decision as a table)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from pigeond.config import DEFAULTS, Config
from pigeond.delivery.opencode_client import FailureKind
from pigeond.envelope import render_envelope
from pigeond.model import HandoffMode, StoredMessage

BACKOFF_SCHEDULE_S: tuple[float, ...] = (1, 2, 5, 15, 60)


def backoff_after(failed_attempts: int, schedule: Sequence[float] = BACKOFF_SCHEDULE_S) -> float:
    """Seconds to wait after the ``failed_attempts``-th failure (1-based)."""
    return schedule[min(max(failed_attempts, 1), len(schedule)) - 1]


def within_bytes(
    batch: Sequence[StoredMessage], max_bytes: int
) -> tuple[list[StoredMessage], list[str]]:
    """The head of ``batch`` whose rendered envelopes fit in ``max_bytes`` (UTF-8), and
    those envelopes.  The envelope is measured, not the payload: escaping can make a
    text five times longer.  The first message always goes, alone if it is larger."""
    kept: list[StoredMessage] = []
    texts: list[str] = []
    total = 0
    for message in batch:
        text = render_envelope(message)
        size = len(text.encode("utf-8"))
        if kept and total + size > max_bytes:
            break
        kept.append(message)
        texts.append(text)
        total += size
    return kept, texts


@dataclass(frozen=True, slots=True)
class UnrecordedHandOff:
    """A prompt opencode took (2xx) that the database could not record yet."""

    target: str
    msg_ids: tuple[str, ...]
    at_ms: int
    verify_by: int
    mode: HandoffMode
    error: str = field(compare=False)


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """The arbiter's settings, defaulting to the options' defaults."""

    tick_s: float = DEFAULTS.tick_ms / 1000
    max_attempts: int = DEFAULTS.max_attempts
    backoff_schedule: tuple[float, ...] = BACKOFF_SCHEDULE_S
    batch_max: int = DEFAULTS.batch_max
    outage_retry_s: float = DEFAULTS.outage_retry_s
    verify_grace_s: float = DEFAULTS.verify_grace_s
    batch_max_bytes: int = DEFAULTS.batch_max_bytes

    @classmethod
    def from_config(cls, config: Config) -> DeliveryPolicy:
        return cls(
            tick_s=config.tick_ms / 1000, max_attempts=config.max_attempts,
            batch_max=config.batch_max, outage_retry_s=config.outage_retry_s,
            verify_grace_s=config.verify_grace_s, batch_max_bytes=config.batch_max_bytes,
        )  # fmt: skip


class Next(Enum):
    """What becomes of a message after a failed hand-off."""

    HOLD = "hold"  # queued, retried at retry_at_ms, no attempt spent
    RETRY = "retry"  # queued, one attempt spent, retried at retry_at_ms after the backoff
    FAIL = "fail"  # failed for good (its sender is told)


@dataclass(frozen=True, slots=True)
class RetryDecision:
    next: Next
    retry_at_ms: int | None
    spends_attempt: bool


def decide_retry(
    kind: FailureKind, attempts: int, now_ms: int, policy: DeliveryPolicy
) -> RetryDecision:
    """After a hand-off failed with ``kind``, for a message that had failed ``attempts``
    times before: an outage holds it for ``outage_retry_s`` without spending an attempt; a
    permanent error fails it at once (spending the attempt it was); anything else spends
    an attempt and backs off, and fails it once ``max_attempts`` are spent."""
    if kind is FailureKind.OUTAGE:
        return RetryDecision(Next.HOLD, now_ms + int(policy.outage_retry_s * 1000), False)
    if kind is FailureKind.PERMANENT:
        return RetryDecision(Next.FAIL, None, True)
    spent = attempts + 1
    if spent >= policy.max_attempts:
        return RetryDecision(Next.FAIL, None, True)
    delay_s = backoff_after(spent, policy.backoff_schedule)
    return RetryDecision(Next.RETRY, now_ms + int(delay_s * 1000), True)
