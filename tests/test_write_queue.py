"""The writer thread's queue: urgent writes go before queued bookkeeping, never for ever."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred, DeferredList

from pigeond.storage.write_marks import is_urgent, shares_commit, urgent
from pigeond.storage.write_queue import MAX_SHARED, URGENT_IN_A_ROW, WriteQueue

reactor: Any = global_reactor


@pytest.fixture
def writes() -> Iterator[WriteQueue]:
    queue = WriteQueue(reactor, name="test-writer")
    queue.start()
    yield queue
    queue.stop()


def hold(writes: WriteQueue, *, started: bool = True) -> threading.Event:
    """Keep the writer thread busy until the returned event is set: what is asked
    meanwhile queues up behind it (once the hold runs, unless the thread is not
    ``started`` yet)."""
    release, running = threading.Event(), threading.Event()

    def wait() -> None:
        running.set()
        release.wait(timeout=10)

    writes.submit(False, wait)
    if started:
        assert running.wait(timeout=10)
    return release


def queue_up(writes: WriteQueue, kinds: str, ran: list[str]) -> list[Deferred[None]]:
    """One write per letter of ``kinds`` (``u`` urgent, ``o`` other), named by its place."""
    return [writes.submit(kind == "u", ran.append, f"{kind}{i}") for i, kind in enumerate(kinds)]


@pytest_twisted.ensureDeferred
async def test_an_urgent_write_goes_before_the_others_queued(writes: WriteQueue) -> None:
    """Two bookkeeping writes queued, then an urgent one: the urgent one runs first, the
    others in the order asked."""
    ran: list[str] = []
    release = hold(writes)
    done = queue_up(writes, "oou", ran)
    release.set()
    await DeferredList(done)
    assert ran == ["u2", "o0", "o1"]


@pytest_twisted.ensureDeferred
async def test_urgent_writes_let_a_waiting_write_through_after_a_few(
    writes: WriteQueue,
) -> None:
    """A stream of urgent writes does not starve the others: one goes after every
    URGENT_IN_A_ROW urgent ones."""
    ran: list[str] = []
    release = hold(writes)
    done = queue_up(writes, "oo" + "u" * (2 * URGENT_IN_A_ROW + 1), ran)
    release.set()
    await DeferredList(done)
    urgent_ones = [f"u{i}" for i in range(2, 2 * URGENT_IN_A_ROW + 3)]
    first, second = urgent_ones[:URGENT_IN_A_ROW], urgent_ones[URGENT_IN_A_ROW:]
    assert ran == [*first, "o0", *second[:URGENT_IN_A_ROW], "o1", *second[URGENT_IN_A_ROW:]]


@pytest_twisted.ensureDeferred
async def test_a_failed_write_fails_its_own_deferred_only(writes: WriteQueue) -> None:
    """An exception in a write is its caller's failure; the next write runs as usual."""
    failed = writes.submit(False, int, "not a number")
    after = writes.submit(True, int, "7")
    with pytest.raises(ValueError):
        await failed
    assert await after == 7


def test_stop_runs_what_was_asked_before_the_thread_ends() -> None:
    """Stopping waits for every write already queued (a 202 may wait on one)."""
    writes = WriteQueue(reactor, name="test-writer")
    ran: list[str] = []
    release = hold(writes, started=False)
    queue_up(writes, "ou", ran)
    writes.start()
    release.set()
    writes.stop()
    assert ran == ["u1", "o0"]


def test_urgent_marks_a_call_and_leaves_it_callable() -> None:
    """``@urgent`` is a mark on the function itself; unmarked calls are not urgent."""

    @urgent
    def intent(value: int) -> int:
        return value + 1

    assert (is_urgent(intent), is_urgent(len), intent(1)) == (True, False, 2)


class Together:
    """A stand-in for the repository's ``write_together``: runs the calls, records each
    group, and fails when told to."""

    def __init__(self) -> None:
        self.groups: list[int] = []
        self.fail = False

    def __call__(self, calls: Sequence[Callable[[], object]]) -> list[object]:
        self.groups.append(len(calls))
        if self.fail:
            raise RuntimeError("the shared commit failed")
        return [call() for call in calls]


@pytest.fixture
def together() -> Together:
    return Together()


@pytest.fixture
def sharing(together: Together) -> Iterator[WriteQueue]:
    queue = WriteQueue(reactor, name="test-writer", together=together)
    queue.start()
    yield queue
    queue.stop()


@shares_commit
def bookkeeping(ran: list[str], name: str) -> str:
    ran.append(name)
    return name


def apart(ran: list[str], name: str) -> str:
    ran.append(name)
    return name


def queue_sharing(writes: WriteQueue, kinds: str, ran: list[str]) -> list[Deferred[str]]:
    """One write per letter (``s`` shares a commit, ``o`` does not), named by its place."""
    calls = {"s": bookkeeping, "o": apart}
    return [writes.submit(False, calls[kind], ran, f"{kind}{i}") for i, kind in enumerate(kinds)]


@pytest_twisted.ensureDeferred
async def test_bookkeeping_queued_back_to_back_shares_one_commit(
    sharing: WriteQueue, together: Together
) -> None:
    """Three sharing writes queued together go in one transaction, each with its result."""
    ran: list[str] = []
    release = hold(sharing)
    done = queue_sharing(sharing, "sss", ran)
    release.set()
    assert [await d for d in done] == ["s0", "s1", "s2"]
    assert together.groups == [3]


@pytest_twisted.ensureDeferred
async def test_a_write_that_does_not_share_keeps_its_place_and_runs_alone(
    sharing: WriteQueue, together: Together
) -> None:
    """``s s o s``: the first two share, the other runs alone after them, the last alone."""
    ran: list[str] = []
    release = hold(sharing)
    done = queue_sharing(sharing, "ssos", ran)
    release.set()
    await DeferredList(done)
    assert (ran, together.groups) == (["s0", "s1", "o2", "s3"], [2])


@pytest_twisted.ensureDeferred
async def test_a_failed_shared_commit_runs_each_write_alone(
    sharing: WriteQueue, together: Together
) -> None:
    """When the shared transaction fails, every write runs again alone and gets its own
    answer (so one write's error stays its own)."""
    ran: list[str] = []
    together.fail = True
    release = hold(sharing)
    done = queue_sharing(sharing, "ss", ran)
    release.set()
    assert [await d for d in done] == ["s0", "s1"]
    assert (together.groups, ran) == ([2], ["s0", "s1"])


@pytest_twisted.ensureDeferred
async def test_at_most_MAX_SHARED_writes_share_a_commit(
    sharing: WriteQueue, together: Together
) -> None:
    """A long run of sharing writes is cut into transactions of MAX_SHARED at most."""
    ran: list[str] = []
    release = hold(sharing)
    done = queue_sharing(sharing, "s" * (MAX_SHARED + 1), ran)
    release.set()
    await DeferredList(done)
    assert together.groups == [MAX_SHARED]  # the last one ran alone


@pytest_twisted.ensureDeferred
async def test_without_a_together_runner_every_write_runs_alone(writes: WriteQueue) -> None:
    """A queue given no way to share a commit runs sharing writes one by one, in order."""
    ran: list[str] = []
    release = hold(writes)
    done = queue_sharing(writes, "ss", ran)
    release.set()
    assert [await d for d in done] == ["s0", "s1"]
