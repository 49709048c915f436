"""How hard, how often and how much the arbiter delivers: its settings, the backoff, and
the byte bound of a batch.  Plain data and functions, so they are tested alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pigeond.envelope import render_envelope
from pigeond.model import HandoffMode, StoredMessage

BACKOFF_SCHEDULE_S: tuple[float, ...] = (1, 2, 5, 15, 60)
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_BATCH_MAX_BYTES = 1024 * 1024


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
    tick_s: float = 0.5
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_schedule: tuple[float, ...] = BACKOFF_SCHEDULE_S
    batch_max: int = 10
    outage_retry_s: float = 30.0
    verify_grace_s: float = 60.0
    batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES
