"""Service plumbing in-process: the instance lock, the watchdog, status, log lines."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from twisted.internet.defer import succeed
from twisted.internet.task import Clock
from twisted.logger import LogLevel, formatEvent
from twisted.python.failure import Failure

from pigeond.service.logs import (
    LevelFilter,
    LineObserver,
    event_text,
    format_json,
    format_text,
)
from pigeond.service.systemd import (
    AlreadyRunning,
    InstanceLock,
    StatusReporter,
    Watchdog,
    watchdog_period_s,
)
from pigeond.service.ticker import Ticker


class Recorder:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def notify(self, state: str) -> None:
        self.sent.append(state)


def test_second_lock_is_refused_with_holder_pid(tmp_path: Path) -> None:
    """A second holder of the same database's lock is refused, naming the first's pid."""
    first = InstanceLock(tmp_path / "p.db")
    first.acquire()
    with pytest.raises(AlreadyRunning, match=f"pid {os.getpid()}"):
        InstanceLock(tmp_path / "p.db").acquire()
    first.release()
    again = InstanceLock(tmp_path / "p.db")
    again.acquire()
    again.release()


def test_lock_lives_beside_the_database(tmp_path: Path) -> None:
    """The lock file is the database path plus .lock, holding the pid."""
    lock = InstanceLock(tmp_path / "state" / "p.db")
    lock.acquire()
    assert (tmp_path / "state" / "p.db.lock").read_text().strip() == str(os.getpid())
    lock.release()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "30000000"}, 30.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1234"}, 30.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "999"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
    ],
)
def test_watchdog_period(env: dict[str, str], expected: float | None) -> None:
    """The watchdog runs when systemd asks this process (WATCHDOG_PID ours or unset)."""
    assert watchdog_period_s(env, 1234) == expected


def test_watchdog_pings_every_half_period_while_alive(clock: Clock) -> None:
    """WATCHDOG=1 goes out every half period while the work goes on, and stops when stuck."""
    notifier, alive = Recorder(), [True]
    watchdog = Watchdog(notifier, clock, 10.0, lambda: alive[0])
    watchdog.start()
    for _ in range(4):
        clock.advance(5)
    assert notifier.sent == ["WATCHDOG=1"] * 5
    alive[0] = False
    for _ in range(4):
        clock.advance(5)
    assert notifier.sent == ["WATCHDOG=1"] * 5


def test_status_reports_changes_only(clock: Clock) -> None:
    """STATUS= is sent when the status line changes, checked on the daemon's tick."""
    notifier, line = Recorder(), ["queued 0"]
    reporter = StatusReporter(notifier, lambda: succeed(line[0]))
    ticker = Ticker(clock, 0.5)
    ticker.add("status", reporter.report, every_s=1.0)
    ticker.start()
    reporter.start()
    clock.advance(1)
    line[0] = "queued 3"
    clock.advance(1)
    assert notifier.sent == ["STATUS=queued 0", "STATUS=queued 3"]


def test_status_has_no_timer_of_its_own(clock: Clock) -> None:
    """Started, the reporter schedules nothing: only the daemon's tick calls it."""
    reporter = StatusReporter(Recorder(), lambda: succeed("queued 0"))
    reporter.start()
    assert clock.getDelayedCalls() == []


def test_status_is_not_reported_after_stop(clock: Clock) -> None:
    """Stopped (shutdown), a tick's call sends nothing more."""
    notifier, line = Recorder(), ["queued 0"]
    reporter = StatusReporter(notifier, lambda: succeed(line[0]))
    reporter.start()
    reporter.stop()
    line[0] = "queued 3"
    reporter.report()
    assert notifier.sent == ["STATUS=queued 0"]


def test_text_line_has_fields_and_no_newline() -> None:
    """A text log line is one line: level, namespace, message, and its msg_id fields."""
    event = {
        "log_level": LogLevel.info, "log_namespace": "pigeond.delivery.arbiter",
        "log_format": "handed off {msg_id}\nnext", "msg_id": "msg_1", "target": "ses_t",
    }  # fmt: skip
    assert format_text(event) == (
        "info pigeond.delivery.arbiter: handed off msg_1\\nnext msg_id=msg_1 target=ses_t"
    )


def test_text_line_of_a_failure_is_one_line() -> None:
    """A failure adds its type, message and traceback, all on the one line."""
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        failure = Failure()
    event = {"log_level": LogLevel.error, "log_namespace": "x", "log_format": "oops",
             "log_failure": failure}  # fmt: skip
    line = format_text(event)
    assert "\n" not in line and "(ValueError: bad\\nthing)" in line
    assert "Traceback (most recent call last):\\n" in line and "test_service.py" in line


@pytest.mark.parametrize(
    "log_format",
    [
        "accepted {msg_id} from {sender}",  # the hot path
        "{msg_id!r} at {when:>6}",  # conversion and format spec
        "{thing.real} and {items[0]}",  # attribute and index
        "{call()} called",  # Twisted's call syntax
        "handed off {msg_id} (batch of {when}; {sender})",  # parentheses in the text
        "{thing(x)} odd",  # a field name with parentheses: Twisted's reading
        "{missing} field",  # unformattable: Twisted says so
        "{unclosed",  # a broken format
        "no fields at all",
    ],
)
def test_event_text_writes_what_twisted_would(log_format: str) -> None:
    """The fast message formatting agrees with twisted.logger.formatEvent for any format."""
    event = {"log_format": log_format, "msg_id": "msg_1", "sender": "ses_a", "when": 5,
             "thing": 3, "items": ["x"], "call": lambda: "yes"}  # fmt: skip
    assert event_text(event) == formatEvent(event)


def test_json_line_carries_fields() -> None:
    """A JSON log line is one object with level, namespace, message and event fields."""
    event = {"log_level": LogLevel.warn, "log_namespace": "pigeond.delivery.arbiter",
             "log_time": 5.0, "log_format": "{msg_id} failed", "msg_id": "msg_1"}  # fmt: skip
    record = json.loads(format_json(event))
    assert record == {"time": 5.0, "level": "warn", "namespace": "pigeond.delivery.arbiter",
                      "message": "msg_1 failed", "msg_id": "msg_1"}  # fmt: skip


def test_observer_writes_one_line_per_event() -> None:
    """Each event becomes exactly one line on the stream."""
    out = io.StringIO()
    observer = LineObserver(out, json_lines=True)
    observer({"log_level": LogLevel.info, "log_namespace": "n", "log_format": "a"})
    observer({"log_level": LogLevel.info, "log_namespace": "n", "log_format": "b"})
    assert len(out.getvalue().splitlines()) == 2


class CountingStream(io.StringIO):
    """A stream that counts its writes (each one a write to the pipe)."""

    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def info(text: str) -> dict[str, object]:
    return {"log_level": LogLevel.info, "log_namespace": "n", "log_format": text}


def test_info_lines_of_one_turn_are_one_write_at_its_end() -> None:
    """On a reactor, the info lines of one turn wait for it to end, then go in one write."""
    out, clock = CountingStream(), Clock()
    observer = LineObserver(out, json_lines=False, clock=clock)
    observer(info("a"))
    observer(info("b"))
    assert out.getvalue() == ""
    clock.advance(0)
    assert (out.getvalue(), out.writes) == ("info n: a\ninfo n: b\n", 1)


def test_a_warning_goes_at_once_after_the_lines_before_it() -> None:
    """A warning is written at once, the turn's info lines first, in order."""
    out, clock = CountingStream(), Clock()
    observer = LineObserver(out, json_lines=False, clock=clock)
    observer(info("a"))
    observer({"log_level": LogLevel.warn, "log_namespace": "n", "log_format": "w"})
    assert out.getvalue() == "info n: a\nwarn n: w\n"


def test_factory_chatter_is_dropped_and_the_rest_kept() -> None:
    """Twisted's per-connection "Starting factory" lines are dropped; other events pass."""
    out = io.StringIO()
    observer = LevelFilter(LineObserver(out, json_lines=False), "info")
    for text in ("Starting factory {factory!r}", "Stopping factory {factory!r}", "kept {factory}"):
        observer({"log_level": LogLevel.info, "log_namespace": "n", "log_format": text,
                  "factory": "F"})  # fmt: skip
    assert out.getvalue() == "info n: kept F\n"


def test_level_filter_drops_events_below_the_live_level() -> None:
    """Below the level nothing is written; a new level (SIGHUP) applies to the next event."""
    out = io.StringIO()
    observer = LevelFilter(LineObserver(out, json_lines=False), "info")
    for level in (LogLevel.debug, LogLevel.info, LogLevel.warn, LogLevel.critical):
        observer({"log_level": level, "log_namespace": "n", "log_format": level.name})
    observer.set_level("error")
    observer({"log_level": LogLevel.warn, "log_namespace": "n", "log_format": "late warn"})
    observer({"log_level": LogLevel.error, "log_namespace": "n", "log_format": "late error"})
    observer.set_level("debug")
    observer({"log_level": LogLevel.debug, "log_namespace": "n", "log_format": "late debug"})
    assert out.getvalue() == (
        "info n: info\nwarn n: warn\ncritical n: critical\nerror n: late error\n"
        "debug n: late debug\n"
    )


def test_level_filter_drops_an_event_without_a_namespace_or_a_level() -> None:
    """As Twisted's own level filter does: neither can be ranked against the level."""
    out = io.StringIO()
    observer = LevelFilter(LineObserver(out, json_lines=False), "debug")
    observer({"log_level": LogLevel.error, "log_namespace": "", "log_format": "no namespace"})
    observer({"log_namespace": "n", "log_format": "no level"})
    observer({"log_level": LogLevel.error, "log_namespace": "n", "log_format": "kept"})
    assert out.getvalue() == "error n: kept\n"


def test_text_line_does_not_repeat_an_error_already_in_its_text() -> None:
    """The ids always end the line; other fields only when the text does not say them."""
    event = {"log_level": LogLevel.info, "log_namespace": "pigeond.delivery.events",
             "log_format": "event stream down ({reason})", "reason": "refused",
             "target": "ses_t"}  # fmt: skip
    assert (
        format_text(event)
        == "info pigeond.delivery.events: event stream down (refused) target=ses_t"
    )
