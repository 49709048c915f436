"""Turn tracking: waiting for a session's turn to end, from events or by polling."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.delivery.opencode_client import FailureKind, OpencodeError
from pigeond.delivery.turns import TurnTracker
from tests.http_helpers import failure_of, result_of

S = "ses_t"
DIR = "/work/t"


@dataclass
class FakePoller:
    """GET /session/status: the sessions listed in ``busy`` are busy."""

    busy: set[str] = field(default_factory=set)
    polls: int = 0
    error: OpencodeError | None = None

    async def busy_sessions(self, directory: str) -> dict[str, str]:
        self.polls += 1
        if self.error is not None:
            raise self.error
        return {s: "busy" for s in self.busy}


def tracker(clock: Clock, poller: FakePoller, connected: bool = True) -> TurnTracker:
    t = TurnTracker(clock, poller, Config(busy_window_s=5, turn_timeout_s=600, status_poll_s=1))
    t.stream_state(connected)
    t.observe(S, "idle")
    return t


def start(coro: Any) -> Deferred[str]:
    return Deferred.fromCoroutine(coro)


def test_turn_ends_on_busy_then_idle(clock: Clock) -> None:
    """After a hand-off, waiting ends once a busy status is followed by idle."""
    t = tracker(clock, FakePoller())
    wait = start(t.wait_turn_end(S, DIR, t.mark(S)))
    t.observe(S, "busy")
    clock.advance(30)
    assert not wait.called
    t.observe(S, "idle")
    assert result_of(wait) == "turn ended"


def test_busy_seen_before_waiting_counts(clock: Clock) -> None:
    """A turn that started and ended before the wait began has ended."""
    t = tracker(clock, FakePoller())
    mark = t.mark(S)
    t.observe(S, "busy")
    t.observe(S, "idle")
    assert result_of(start(t.wait_turn_end(S, DIR, mark))) == "turn ended"


def test_retry_status_counts_as_busy(clock: Clock) -> None:
    """opencode's retry status (an LLM call being retried) keeps the turn running."""
    t = tracker(clock, FakePoller())
    wait = start(t.wait_turn_end(S, DIR, t.mark(S)))
    t.observe(S, "retry")
    clock.advance(10)
    assert not wait.called
    t.observe(S, "idle")
    assert result_of(wait) == "turn ended"


def test_no_busy_within_window_counts_as_ended(clock: Clock) -> None:
    """If no busy status comes within the window, no turn started: stop waiting."""
    t = tracker(clock, FakePoller())
    wait = start(t.wait_turn_end(S, DIR, t.mark(S)))
    clock.advance(4.9)
    assert not wait.called
    clock.advance(0.1)
    assert "no busy status within 5 s" in result_of(wait)


def test_turn_timeout_goes_ahead(clock: Clock) -> None:
    """A turn still running after the turn timeout stops the wait, saying why."""
    t = tracker(clock, FakePoller())
    wait = start(t.wait_turn_end(S, DIR, t.mark(S)))
    t.observe(S, "busy")
    clock.advance(599)
    assert not wait.called
    clock.advance(1)
    assert "still running after 600 s" in result_of(wait)


def test_other_sessions_do_not_end_the_wait(clock: Clock) -> None:
    """Statuses of other sessions do not count."""
    t = tracker(clock, FakePoller())
    wait = start(t.wait_turn_end(S, DIR, t.mark(S)))
    t.observe(S, "busy")
    t.observe("ses_other", "idle")
    assert not wait.called


def test_polls_while_stream_is_down(clock: Clock) -> None:
    """With the event stream down, status comes from polling once per interval."""
    poller = FakePoller(busy={S})
    t = tracker(clock, poller, connected=False)
    wait = start(t.wait_turn_end(S, DIR, t.mark(S)))
    assert poller.polls == 0
    clock.advance(1)
    assert poller.polls == 1 and not wait.called
    poller.busy.clear()
    clock.advance(1)
    assert result_of(wait) == "turn ended" and poller.polls == 2


def test_poll_errors_do_not_stop_the_wait(clock: Clock) -> None:
    """A failed status poll after a hand-off is logged; waiting goes on to its limits."""
    poller = FakePoller(error=OpencodeError("refused", kind=FailureKind.OUTAGE))
    t = tracker(clock, poller, connected=False)
    wait = start(t.wait_turn_end(S, DIR, t.mark(S)))
    clock.advance(5)
    assert "no busy status" in result_of(wait)


def test_a_turn_wait_polls_nothing_while_opencode_is_down(clock: Clock) -> None:
    """During an outage of opencode a wait asks nothing (the outage is probed elsewhere),
    and polls again once opencode answers."""
    poller = FakePoller(busy={S})
    down = [True]
    config = Config(busy_window_s=5, turn_timeout_s=600, status_poll_s=1)
    t = TurnTracker(clock, poller, config, opencode_down=lambda: down[0])
    t.stream_state(False)
    wait = start(t.wait_turn_end(S, DIR, t.mark(S)))
    t.observe(S, "busy")  # the turn started before opencode went away
    clock.pump([1] * 120)
    assert poller.polls == 0 and not wait.called
    down[0] = False
    poller.busy.clear()
    clock.advance(1)
    assert (result_of(wait), poller.polls) == ("turn ended", 1)


def test_wait_until_idle_waits_for_a_persons_turn(clock: Clock) -> None:
    """Before a hand-off, a session busy with a turn someone else started is waited for."""
    t = tracker(clock, FakePoller())
    t.observe(S, "busy")
    wait = start(t.wait_until_idle(S, DIR))
    clock.advance(100)
    assert not wait.called
    t.observe(S, "idle")
    assert result_of(wait) == "idle"


def test_wait_until_idle_polls_when_status_unknown(clock: Clock) -> None:
    """When nothing is known of the session, its status is polled first."""
    poller = FakePoller()
    t = TurnTracker(clock, poller, Config())
    t.stream_state(True)
    assert result_of(start(t.wait_until_idle(S, DIR))) == "idle"
    assert poller.polls == 1


def test_wait_until_idle_raises_when_poll_fails(clock: Clock) -> None:
    """An unreachable opencode before a hand-off is an error the arbiter handles."""
    poller = FakePoller(error=OpencodeError("refused", kind=FailureKind.OUTAGE))
    t = TurnTracker(clock, poller, Config())
    assert failure_of(start(t.wait_until_idle(S, DIR))).check(OpencodeError)


def test_dropped_stream_forgets_status(clock: Clock) -> None:
    """Events may be missed while the stream is down, so known statuses are forgotten."""
    t = tracker(clock, FakePoller())
    t.observe(S, "busy")
    t.stream_state(False)
    assert t.is_busy(S) is None


@pytest.mark.parametrize("status", ["weird", ""])
def test_unknown_status_is_ignored(clock: Clock, status: str) -> None:
    """A status type pigeond does not know changes nothing."""
    t = tracker(clock, FakePoller())
    t.observe(S, status)
    assert t.is_busy(S) is False
