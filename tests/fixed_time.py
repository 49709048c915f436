"""The fixed time tests run at, so that ids and timestamps are predictable."""

from __future__ import annotations

from twisted.internet.task import Clock

START_S = 1_793_491_200.0
"""2026-11-01T00:00:00Z in seconds: where the ``clock`` fixture starts."""

NOW_MS = 1_793_491_200_000
"""The same instant in milliseconds, as storage takes its times."""


def now_ms(clock: Clock) -> int:
    """The clock's time in milliseconds."""
    return int(clock.seconds() * 1000)
