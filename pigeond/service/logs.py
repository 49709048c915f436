"""One line per event on stdout: plain text for journald (which adds the time), or JSON.

Event fields such as ``msg_id`` and ``target`` become ``key=value`` pairs (text)
or keys (JSON), so ``journalctl -u pigeond | grep msg_id=msg_...`` finds a
message's whole story.  An unexpected error carries its traceback: in text, on
the same line with its line breaks written ``\n`` (one journal entry per
event); in JSON, as ``traceback``.

Lines at ``info`` and ``debug`` logged on the reactor thread are written together once per
reactor turn, one write to the pipe for all of them (a busy daemon logs a few lines per
message, and one write and flush each cost more than the line's formatting); a warning
or worse, a line from another thread and the lines of the last turn at exit are written
at once.
"""

from __future__ import annotations

import atexit
import json
import sys
import threading
from typing import IO, Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import (
    ILogObserver,
    LogEvent,
    LogLevel,
    formatEvent,
    globalLogBeginner,
)
from zope.interface import implementer

LEVELS = {"debug": LogLevel.debug, "info": LogLevel.info, "warn": LogLevel.warn,
          "error": LogLevel.error}  # fmt: skip
FIELDS = ("msg_id", "msg_ids", "target", "attempts", "error", "reason")
ALWAYS = frozenset({"msg_id", "msg_ids", "target"})


def _fields(event: dict[str, Any]) -> dict[str, Any]:
    return {k: event[k] for k in FIELDS if k in event}


def event_text(event: dict[str, Any]) -> str:
    """The event's message, as :func:`twisted.logger.formatEvent` would write it.

    A plain format (no ``{call()}``, Twisted's own addition) goes through
    ``str.format_map``, which does the same in C at a twelfth of the cost: every
    accepted send logs a line, so this is on the hot path.  A parenthesis in the text
    itself ("(batch of {n})") is plain: only ``()`` marks a call.  Anything else, or a
    format that does not fit its fields, is left to ``formatEvent`` and its
    "Unable to format event" text."""
    fmt = event.get("log_format")
    if isinstance(fmt, str) and "()" not in fmt and "log_flattened" not in event:
        try:
            return fmt.format_map(event)
        except (KeyError, IndexError, AttributeError, TypeError, ValueError):
            pass  # formatEvent below says what is wrong with it
    return formatEvent(event)


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def format_text(event: dict[str, Any]) -> str:
    level = event.get("log_level", LogLevel.info).name
    namespace = event.get("log_namespace", "-")
    line = f"{level} {namespace}: {event_text(event)}"
    # the ids always (so grep finds a message's story); the rest only if the text lacks it
    extras = " ".join(
        f"{k}={v}" for k, v in _fields(event).items() if k in ALWAYS or f"{v}" not in line
    )
    if extras:
        line += " " + extras
    failure = event.get("log_failure")
    if failure is not None:
        line += f" ({failure.type.__name__}: {failure.getErrorMessage()})"
        line += " " + failure.getTraceback().rstrip("\n")
    return _one_line(line)


def format_json(event: dict[str, Any]) -> str:
    record: dict[str, Any] = {
        "time": event.get("log_time"),
        "level": event.get("log_level", LogLevel.info).name,
        "namespace": event.get("log_namespace", "-"),
        "message": event_text(event),
    }
    record.update(_fields(event))
    failure = event.get("log_failure")
    if failure is not None:
        record["exception"] = f"{failure.type.__name__}: {failure.getErrorMessage()}"
        record["traceback"] = failure.getTraceback()
    return json.dumps(record, default=str, ensure_ascii=False)


# Lines written at once, whatever thread or turn: what an operator must see even if the
# process is killed right after.
AT_ONCE = frozenset({LogLevel.warn, LogLevel.error, LogLevel.critical})


@implementer(ILogObserver)
class LineObserver:
    def __init__(self, out: IO[str], json_lines: bool, clock: IReactorTime | None = None) -> None:
        """``clock``: the reactor whose turns the lines logged on its thread wait for
        (None: every line is written at once)."""
        self._out = out
        self._format = format_json if json_lines else format_text
        self._clock = clock
        self._thread = threading.get_ident()  # the reactor's: the one that starts logging
        self._lock = threading.Lock()
        self._pending: list[str] = []

    def __call__(self, event: dict[str, Any]) -> None:
        try:
            line = self._format(event) + "\n"
            later = (
                self._clock is not None
                and event.get("log_level") not in AT_ONCE
                and threading.get_ident() == self._thread
            )
            with self._lock:
                self._pending.append(line)
                if later and len(self._pending) > 1:
                    return  # the turn's write is already asked for
            if later and self._clock is not None:
                self._clock.callLater(0, self.flush)
            else:
                self.flush()
        except Exception:  # a log line must never take the daemon down
            pass

    def flush(self) -> None:
        """Write the lines still waiting, in the order they were logged."""
        with self._lock:
            lines, self._pending = self._pending, []
        if lines:
            try:
                self._out.write("".join(lines))
                self._out.flush()
            except Exception:  # a log line must never take the daemon down
                pass


# Twisted logs these for every connection a factory opens and closes: the HTTP client's
# pool to opencode would write two lines per connection, which say nothing an operator
# needs (pigeond's own site is not noisy).
FACTORY_CHATTER = frozenset({"Starting factory {factory!r}", "Stopping factory {factory!r}"})


# Each level's rank, looked up once: Twisted's own level filter ranks a level by iterating
# the LogLevel constants, for every event, and walks the namespace's parts for its level;
# a busy daemon logs a few lines per message (and as many debug events it drops).
_RANK = {level: rank for rank, level in enumerate(LogLevel.iterconstants())}


@implementer(ILogObserver)
class LevelFilter:
    """Passes the events at the live level or above, but :data:`FACTORY_CHATTER`, to
    ``observer``: what Twisted's ``FilteringLogObserver`` with a
    ``LogLevelFilterPredicate`` of one level for every namespace does, at a fraction of
    its cost per event.  SIGHUP changes the level (:meth:`LogSettings.set_level`)."""

    def __init__(self, observer: ILogObserver, level: str) -> None:
        self._observer = observer
        self.set_level(level)

    def set_level(self, level: str) -> None:
        self._least = _RANK[LEVELS[level]]

    def __call__(self, event: LogEvent) -> None:
        # an event without a level or a namespace is dropped, as Twisted's filter drops it
        if (
            _RANK.get(event.get("log_level"), -1) < self._least
            or not event.get("log_namespace")
            or event.get("log_format") in FACTORY_CHATTER
        ):
            return
        self._observer(event)


class LogSettings:
    """The live log level, so SIGHUP can change it."""

    def __init__(self, level: str, lines: ILogObserver) -> None:
        self.observer = LevelFilter(lines, level)

    def set_level(self, level: str) -> None:
        self.observer.set_level(level)


def start_logging(
    level: str, fmt: str, out: IO[str] = sys.stdout, clock: IReactorTime | None = None
) -> LogSettings:
    """Log to ``out`` from now on; ``clock``: the reactor, whose turns info lines wait for."""
    lines = LineObserver(out, fmt == "json", clock)
    atexit.register(lines.flush)
    settings = LogSettings(level, lines)
    globalLogBeginner.beginLoggingTo([settings.observer], redirectStandardIO=False)
    return settings
