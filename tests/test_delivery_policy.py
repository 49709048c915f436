"""What follows a failed hand-off, as a table: kind and attempts in, next state and time out."""

from __future__ import annotations

import pytest

from pigeond.delivery.opencode_client import FailureKind
from pigeond.delivery.policy import DeliveryPolicy, Next, RetryDecision, decide_retry
from tests.fixed_time import NOW_MS

POLICY = DeliveryPolicy(max_attempts=4, backoff_schedule=(1, 2, 5), outage_retry_s=30)


@pytest.mark.parametrize(
    ("kind", "attempts", "expected"),
    [
        (FailureKind.OUTAGE, 0, RetryDecision(Next.HOLD, NOW_MS + 30_000, False)),
        (FailureKind.OUTAGE, 3, RetryDecision(Next.HOLD, NOW_MS + 30_000, False)),
        (FailureKind.PERMANENT, 0, RetryDecision(Next.FAIL, None, True)),
        (FailureKind.ATTEMPT, 0, RetryDecision(Next.RETRY, NOW_MS + 1_000, True)),
        (FailureKind.ATTEMPT, 1, RetryDecision(Next.RETRY, NOW_MS + 2_000, True)),
        (FailureKind.ATTEMPT, 2, RetryDecision(Next.RETRY, NOW_MS + 5_000, True)),
        (FailureKind.ATTEMPT, 3, RetryDecision(Next.FAIL, None, True)),
    ],
    ids=["outage", "outage-late", "permanent", "attempt-1", "attempt-2", "attempt-3", "last"],
)
def test_retry_decision(kind: FailureKind, attempts: int, expected: RetryDecision) -> None:
    """Outages hold without spending, permanent errors fail, other errors back off to the last."""
    assert decide_retry(kind, attempts, NOW_MS, POLICY) == expected


def test_backoff_stays_on_its_last_step() -> None:
    """Past the schedule's end every retry waits its last step."""
    long = DeliveryPolicy(max_attempts=100, backoff_schedule=(1, 2, 5))
    assert decide_retry(FailureKind.ATTEMPT, 50, NOW_MS, long).retry_at_ms == NOW_MS + 5_000
