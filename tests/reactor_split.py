"""Only the tests that need Twisted's reactor run inside it; every other test runs alone.

pytest-twisted runs *every* test function inside the global reactor (a ``callLater``
in the reactor's greenlet), even a plain synchronous one.  So a test of the Textual TUI
ran its own asyncio loop inside the Twisted reactor, and when one of them failed on a
busy machine ("illegal switch in blockon") the reactor's greenlet ended and the next 120
tests that needed it failed with "twisted reactor has stopped": one failure failed
everything after it.

Here a test goes to pytest-twisted only when it is asynchronous: an ``async def``
(``@pytest_twisted.ensureDeferred``) or a generator (``@pytest_twisted.inlineCallbacks``).
Every other test is called directly in pytest's own greenlet, as plain pytest would,
so a failing TUI (asyncio) test can neither stop nor wedge the reactor, and a plain test
that returns a Deferred or a coroutine by mistake fails loudly instead of passing
unawaited.  Only public names are used to tell the two apart (:mod:`inspect`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from twisted.internet.defer import Deferred


def needs_reactor(function: Callable[..., Any]) -> bool:
    """Whether pytest-twisted must run ``function``: it is a coroutine or generator
    function under its decorators (``ensureDeferred`` / ``inlineCallbacks``)."""
    inner = inspect.unwrap(function)
    return inspect.iscoroutinefunction(inner) or inspect.isgeneratorfunction(inner)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Call a synchronous test directly; leave an asynchronous one to pytest-twisted."""
    test = pyfuncitem.obj
    if needs_reactor(test):
        return None
    wanted = inspect.signature(test).parameters
    arguments = {name: value for name, value in pyfuncitem.funcargs.items() if name in wanted}
    result = test(**arguments)
    if isinstance(result, Deferred) or inspect.isawaitable(result):
        pytest.fail(
            f"{pyfuncitem.name} returned {type(result).__name__}: an asynchronous test must"
            " be an `async def` under @pytest_twisted.ensureDeferred",
            pytrace=False,
        )
    return True
