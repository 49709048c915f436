"""One line per event on stdout: plain text for journald (which adds the time), or JSON.

Event fields such as ``msg_id`` and ``target`` become ``key=value`` pairs (text)
or keys (JSON), so ``journalctl -u pigeond | grep msg_id=msg_...`` finds a
message's whole story.  An unexpected error carries its traceback: in text, on
the same line with its line breaks written ``\n`` (one journal entry per
event); in JSON, as ``traceback``.
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from constantly import NamedConstant
from twisted.logger import (
    FilteringLogObserver,
    ILogFilterPredicate,
    ILogObserver,
    LogEvent,
    LogLevel,
    LogLevelFilterPredicate,
    PredicateResult,
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
    accepted send logs a line, so this is on the hot path.  Anything else, or a
    format that does not fit its fields, is left to ``formatEvent`` and its
    "Unable to format event" text."""
    fmt = event.get("log_format")
    if isinstance(fmt, str) and "(" not in fmt and "log_flattened" not in event:
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


@implementer(ILogObserver)
class LineObserver:
    def __init__(self, out: IO[str], json_lines: bool) -> None:
        self._out = out
        self._format = format_json if json_lines else format_text

    def __call__(self, event: dict[str, Any]) -> None:
        try:
            self._out.write(self._format(event) + "\n")
            self._out.flush()
        except Exception:  # a log line must never take the daemon down
            pass


class LogSettings:
    """The live log level, so SIGHUP can change it."""

    def __init__(self, level: str) -> None:
        self.predicate = LogLevelFilterPredicate(defaultLogLevel=LEVELS[level])

    def set_level(self, level: str) -> None:
        self.predicate.setLogLevelForNamespace("", LEVELS[level])


# Twisted logs these for every connection a factory opens and closes: the HTTP client's
# pool to opencode would write two lines per connection, which say nothing an operator
# needs (pigeond's own site is not noisy).
FACTORY_CHATTER = frozenset({"Starting factory {factory!r}", "Stopping factory {factory!r}"})


@implementer(ILogFilterPredicate)
class WithoutFactoryChatter:
    """Drops :data:`FACTORY_CHATTER`; leaves every other event to the next predicate."""

    def __call__(self, event: LogEvent) -> NamedConstant:
        verdict: NamedConstant = (
            PredicateResult.no
            if event.get("log_format") in FACTORY_CHATTER
            else PredicateResult.maybe
        )
        return verdict


without_factory_chatter = WithoutFactoryChatter()


def start_logging(level: str, fmt: str, out: IO[str] = sys.stdout) -> LogSettings:
    settings = LogSettings(level)
    observer = FilteringLogObserver(
        LineObserver(out, fmt == "json"), [without_factory_chatter, settings.predicate]
    )
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)
    return settings
