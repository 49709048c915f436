"""Whether opencode answers: an outage is said twice (its start and its end), probed at a
bounded rate, and its end noticed within 2 s (pigeond/delivery/reachability.py)."""

from __future__ import annotations

import itertools

import pytest
from twisted.internet.defer import CancelledError
from twisted.internet.task import Clock
from twisted.logger import LogLevel

from pigeond.delivery.reachability import (
    IDLE_PROBE_BACKOFF_S,
    JITTER,
    PROBE_BACKOFF_S,
    OpencodeReachability,
    Reach,
    how_long,
)
from tests.http_helpers import failure_of

URL = "http://127.0.0.1:4096"
REFUSED = "GET /session/ses_t: ConnectionRefusedError: Connection was refused by other side"
TEN_MINUTES_S = 600.0
STEP_S = 0.05


class ProbedOpencode:
    """An opencode the probe asks: each probe answers while ``up``, else is refused; the
    clock time of each probe is kept."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.up = False
        self.probed_at: list[float] = []
        self.reach = OpencodeReachability(URL, clock, self.probe)

    async def probe(self) -> None:
        self.probed_at.append(self.clock.seconds())
        if self.up:
            self.reach.answered()
        else:
            self.reach.failed("GET /session/status: ConnectionRefusedError")


def run_for(clock: Clock, seconds: float) -> None:
    """Let ``seconds`` pass in small steps, as a reactor would."""
    for _ in range(round(seconds / STEP_S)):
        clock.advance(STEP_S)


@pytest.fixture
def opencode(clock: Clock) -> ProbedOpencode:
    return ProbedOpencode(clock)


def test_a_failure_starts_an_outage_with_since_and_the_error(
    opencode: ProbedOpencode, clock: Clock
) -> None:
    """The first failure makes opencode unreachable since that moment, with its error."""
    started = clock.seconds()
    opencode.reach.failed(REFUSED)
    reach = opencode.reach
    assert (reach.state, reach.since, reach.last_error) == (Reach.UNREACHABLE, started, REFUSED)


def test_the_last_error_of_an_outage_is_kept_and_its_start_too(
    opencode: ProbedOpencode, clock: Clock
) -> None:
    """Later failures update the last error; the outage still began at the first."""
    started = clock.seconds()
    opencode.reach.failed(REFUSED)
    run_for(clock, 5)
    assert (opencode.reach.since, opencode.reach.last_error) == (
        started,
        "GET /session/status: ConnectionRefusedError",
    )


def test_an_answer_ends_the_outage_and_clears_since_and_the_error(
    opencode: ProbedOpencode,
) -> None:
    """Any answer makes opencode ok again, with nothing left of the outage."""
    opencode.reach.failed(REFUSED)
    opencode.reach.answered()
    reach = opencode.reach
    assert (reach.state, reach.since, reach.last_error) == (Reach.OK, None, None)


def test_an_outage_is_two_log_lines_however_long(
    opencode: ProbedOpencode, clock: Clock, log_events: list[tuple[LogLevel, str]]
) -> None:
    """Ten minutes of refused probes log a warning when it starts and one line when it ends,
    with how long it lasted; nothing in between."""
    started = clock.seconds()
    opencode.reach.failed(REFUSED)
    run_for(clock, TEN_MINUTES_S)
    opencode.up = True
    run_for(clock, 2)
    said = [(level, text) for level, text in log_events if level >= LogLevel.info]
    lasted = how_long(opencode.probed_at[-1] - started)  # the answering probe ended it
    assert said == [
        (LogLevel.warn, f"opencode at {URL} unreachable ({REFUSED}); delivery waits for it,"
                        " asking again every 2 s at most (30 s while nothing waits)"),
        (LogLevel.info, f"opencode at {URL} answers again after {lasted}; delivery resumes"),
    ]  # fmt: skip


def test_probes_during_a_ten_minute_outage_are_bounded(
    opencode: ProbedOpencode, clock: Clock
) -> None:
    """One probe at a time, never sooner than the shortest wait after the last one, so ten
    minutes cost a few hundred connection attempts, not a storm."""
    opencode.reach.failed(REFUSED)
    run_for(clock, TEN_MINUTES_S)
    gaps = [b - a for a, b in zip(opencode.probed_at, opencode.probed_at[1:], strict=False)]
    shortest_wait = min(PROBE_BACKOFF_S) * (1 - JITTER)
    most = len(PROBE_BACKOFF_S) + TEN_MINUTES_S / (max(PROBE_BACKOFF_S) * (1 - JITTER))
    assert min(gaps) >= shortest_wait - STEP_S
    assert TEN_MINUTES_S / max(PROBE_BACKOFF_S) - 1 <= len(opencode.probed_at) <= most


def test_the_return_is_noticed_within_two_seconds_after_a_long_outage(
    opencode: ProbedOpencode, clock: Clock
) -> None:
    """However long the outage, a probe asks at most 2 s after opencode came back."""
    opencode.reach.failed(REFUSED)
    run_for(clock, TEN_MINUTES_S)
    came_back = clock.seconds()
    opencode.up = True
    while opencode.reach.down:
        clock.advance(STEP_S)
    assert clock.seconds() - came_back <= max(PROBE_BACKOFF_S) + STEP_S


def test_those_waiting_hear_of_the_return_on_the_next_turn(
    opencode: ProbedOpencode, clock: Clock
) -> None:
    """on_back listeners and when_back waiters are told after the answering call, not in it."""
    heard: list[str] = []
    opencode.reach.on_back(lambda: heard.append("listener"))
    opencode.reach.failed(REFUSED)
    opencode.reach.when_back().addCallback(lambda _: heard.append("waiter"))
    opencode.reach.answered()
    assert heard == []
    clock.advance(0)
    assert heard == ["waiter", "listener"]


def test_a_wait_for_the_return_can_be_cancelled(opencode: ProbedOpencode, clock: Clock) -> None:
    """A cancelled when_back fails with CancelledError and is not called at the return."""
    opencode.reach.failed(REFUSED)
    waiting = opencode.reach.when_back()
    waiting.cancel()
    assert failure_of(waiting).check(CancelledError)
    opencode.reach.answered()
    clock.advance(0)


def test_when_back_without_an_outage_fires_at_once(opencode: ProbedOpencode) -> None:
    """Asked while opencode answers (or was never asked), when_back has fired already."""
    assert opencode.reach.when_back().called


def test_an_answer_to_another_call_stops_the_probing(
    opencode: ProbedOpencode, clock: Clock
) -> None:
    """A hand-off's call that gets an answer ends the outage: no probe follows it."""
    opencode.reach.failed(REFUSED)
    run_for(clock, 3)
    probes = len(opencode.probed_at)
    opencode.reach.answered()
    run_for(clock, 10)
    assert len(opencode.probed_at) == probes


def test_stop_ends_the_probing(opencode: ProbedOpencode, clock: Clock) -> None:
    """At shutdown the probing stops, with the outage still under way."""
    opencode.reach.failed(REFUSED)
    run_for(clock, 1)
    probes = len(opencode.probed_at)
    opencode.reach.stop()
    run_for(clock, 10)
    assert (len(opencode.probed_at), opencode.reach.down) == (probes, True)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(4.25, "4.2 s"), (59.96, "60.0 s"), (192, "3 min 12 s"), (7500, "2 h 5 min")],
)
def test_durations_read_as_an_operator_reads_them(seconds: float, shown: str) -> None:
    """Seconds with a tenth under a minute, then minutes and seconds, then hours and minutes."""
    assert how_long(seconds) == shown


def test_while_nothing_needs_opencode_the_probes_slow_to_one_every_30_s(
    opencode: ProbedOpencode, clock: Clock
) -> None:
    """Nothing waits for opencode: after the first quick probes, one every 30 s at most."""
    opencode.reach.needed_while(lambda: False)
    opencode.reach.failed(REFUSED)
    run_for(clock, TEN_MINUTES_S)
    gaps = [b - a for a, b in zip(opencode.probed_at, opencode.probed_at[1:], strict=False)]
    assert min(gaps[len(IDLE_PROBE_BACKOFF_S) :]) >= max(IDLE_PROBE_BACKOFF_S) * (1 - JITTER)
    assert max(gaps) <= max(IDLE_PROBE_BACKOFF_S) + STEP_S


def test_hurry_cuts_a_long_wait_to_the_2_s_pace(opencode: ProbedOpencode, clock: Clock) -> None:
    """Idle probing, then something needs opencode: the next probe comes within 2 s, and
    the ones after it every 2 s at most."""
    needed = [False]
    opencode.reach.needed_while(lambda: needed[0])
    opencode.reach.failed(REFUSED)
    run_for(clock, TEN_MINUTES_S)
    needed[0] = True
    opencode.reach.hurry()
    hurried_at, probes = clock.seconds(), len(opencode.probed_at)
    run_for(clock, 60)
    assert opencode.probed_at[probes] - hurried_at <= max(PROBE_BACKOFF_S) + STEP_S
    gaps = [b - a for a, b in itertools.pairwise(opencode.probed_at[probes:])]
    assert max(gaps) <= max(PROBE_BACKOFF_S) + STEP_S
