"""The test harness itself: a failing test fails alone, and only tests that need the
reactor run inside it (tests/reactor_split.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import greenlet
import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]

ISOLATED_MODULE = textwrap.dedent(
    """
    import asyncio

    import pytest_twisted
    from twisted.internet import reactor, task


    @pytest_twisted.ensureDeferred
    async def test_1_reactor_before() -> None:
        await task.deferLater(reactor, 0.001, lambda: None)


    def test_2_asyncio_loop_fails_inside() -> None:
        async def broken() -> None:
            await asyncio.sleep(0.001)
            raise AssertionError("the TUI test's own failure")

        asyncio.run(broken())


    def test_3_returns_a_deferred_by_mistake():
        return task.deferLater(reactor, 0.001, lambda: None)


    @pytest_twisted.ensureDeferred
    async def test_4_reactor_after() -> None:
        await task.deferLater(reactor, 0.001, lambda: None)
    """
)


def test_a_plain_test_runs_outside_the_reactor_s_greenlet(
    twisted_greenlet: greenlet.greenlet,
) -> None:
    """A synchronous test (a TUI test's asyncio loop, say) never runs inside Twisted's reactor."""
    assert greenlet.getcurrent() is not twisted_greenlet
    assert not twisted_greenlet.dead


def test_a_failing_asyncio_test_fails_alone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two reactor tests, an asyncio test that fails and a test that returns a
    Deferred by mistake each fail alone; the reactor test after them passes."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makepyfile(test_isolated=ISOLATED_MODULE)
    result = pytester.runpytest_subprocess("-p", "tests.reactor_split", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "E   *AssertionError: the TUI test's own failure",
            "test_3_returns_a_deferred_by_mistake returned Deferred: *",
        ]
    )
