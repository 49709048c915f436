"""``pigeond``: the entry point, and the only module that touches the global reactor."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from twisted.internet.defer import Deferred
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)

from pigeond import __version__
from pigeond.config import OPTIONS, Config, ConfigError, load_config
from pigeond.storage import StorageError

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pigeond",
        description="Durable, one-at-a-time delivery of swarm messages to opencode sessions.",
    )
    parser.add_argument("--version", action="version", version=f"pigeond {__version__}")
    parser.add_argument("--config", metavar="PATH", help="TOML config file")
    parser.add_argument(
        "--check-config",
        action="store_true",
        help="print the effective configuration and exit (2 on an error)",
    )
    for option in OPTIONS:
        parser.add_argument(
            option.flag,
            dest=option.name,
            metavar=option.name.upper(),
            help=f"{option.help} (env {option.env_var})",
        )
    return parser


def _fail(message: str, code: int) -> int:
    print(f"pigeond: {message}", file=sys.stderr)
    return code


def _check_endpoint(reactor: object, config: Config) -> None:
    from twisted.internet.endpoints import serverFromString

    try:
        serverFromString(reactor, config.listen)
    except Exception as e:
        raise ConfigError(f"listen: not a usable endpoint {config.listen!r}: {e}") from e


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from twisted.internet import reactor

    try:
        config = load_config(
            {o.name: getattr(args, o.name) for o in OPTIONS}, os.environ, args.config
        )
        _check_endpoint(reactor, config)
    except ConfigError as e:
        return _fail(str(e), EXIT_USAGE)
    if args.check_config:
        print(config.render())
        return EXIT_OK
    return run(config, reactor)


def _start_logging() -> None:
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.info)
    observer = FilteringLogObserver(textFileLogObserver(sys.stdout), [predicate])
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)


def run(config: Config, reactor: object) -> int:
    from pigeond.daemon import build_daemon, stop_later

    try:
        daemon = build_daemon(config, reactor)
    except StorageError as e:
        return _fail(str(e), EXIT_RUNTIME)
    except OSError as e:
        return _fail(f"cannot open the database {config.db}: {e.strerror or e}", EXIT_RUNTIME)
    _start_logging()
    exit_code = [EXIT_OK]

    async def start() -> None:
        try:
            await daemon.listen()
        except Exception as e:
            print(f"pigeond: cannot listen on {config.listen}: {e}", file=sys.stderr)
            exit_code[0] = EXIT_RUNTIME
            reactor.stop()  # type: ignore[attr-defined]
            return
        daemon.start_delivery()

    reactor.addSystemEventTrigger(  # type: ignore[attr-defined]
        "before", "shutdown", lambda: stop_later(daemon)
    )
    reactor.callWhenRunning(lambda: Deferred.fromCoroutine(start()))  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]
    return exit_code[0]


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
