"""Waiting for something a subprocess does: poll, and fail with what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# How long a wait for something another process does may last: enough for a machine with
# four test workers on two cores and another process keeping a core busy.  A bound on a
# wait that normally ends in milliseconds, never a claim about how fast anything is.
PATIENCE_S = 60.0


def wait_until(
    check: Callable[[], T | None], timeout_s: float, what: str, every_s: float = 0.02
) -> T:
    """Call ``check`` every ``every_s`` until it returns something truthy, and return that;
    AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


class Budget:
    """One bound shared by a sequence of waits (a test that must end in time whichever of
    them fails): each is given what is left of it."""

    def __init__(self, total_s: float) -> None:
        self._deadline = time.monotonic() + total_s

    def left(self) -> float:
        return max(0.0, self._deadline - time.monotonic())


def holds_for(
    check: Callable[[], object], duration_s: float, what: str, every_s: float = 0.05
) -> None:
    """Call ``check`` every ``every_s`` for ``duration_s``; AssertionError naming ``what``
    the first time it returns something falsy (what must not happen for a while)."""
    deadline = time.monotonic() + duration_s
    while True:
        if not check():
            raise AssertionError(f"{what} stopped holding within {duration_s:g} s")
        if time.monotonic() >= deadline:
            return
        time.sleep(every_s)
