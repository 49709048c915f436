"""``pigeond``: the entry point, and the only module that touches the global reactor."""

from __future__ import annotations

import argparse
import gc
import io
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorCore, IReactorFromThreads, IReactorTime
from twisted.logger import Logger

from pigeond import __version__
from pigeond.config import (
    OPTION_BY_NAME,
    OPTIONS,
    SERVICE_ENVIRONMENT,
    SYSTEM_CONFIG_FILE,
    Config,
    ConfigError,
    load_config,
    read_config_file,
)
from pigeond.credentials import TokenError
from pigeond.db_url import redacted
from pigeond.storage import StorageError

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
# systemd's STATUS= follows a change within this long (it is sent only when it changes)
STATUS_EVERY_S = 1.0

log = Logger()


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
        help="print the effective configuration and exit (2 on an error); only check it"
        " when standard output is the journal (systemctl reload)",
    )
    for option in OPTIONS:
        parser.add_argument(
            option.flag,
            dest=option.name,
            metavar=option.name.upper(),
            help=f"{option.help} (env {option.env_var})",
        )
    return parser


# Container objects allocated (net) between two collections of the youngest generation;
# Python's default is 700.
GC_YOUNG_THRESHOLD = 10_000


def settle_garbage_collector() -> None:
    """Once started: what start made (modules, the wiring, caches) lives as long as the
    daemon, so it is frozen out of every collection (a full one walked all of it, about
    28 ms each under load); and the youngest generation is collected every
    :data:`GC_YOUNG_THRESHOLD` allocations instead of 700, since each collection walks
    every request in flight, which is most of its cost: under the accept benchmark's load
    the collector's CPU went from about 6 % of the daemon's to 0.6 %.  A request's cyclic
    garbage (Twisted's Deferreds and coroutines) waits a little longer to be freed: at
    most that many objects."""
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, oldest)


def _fail(message: str, code: int) -> int:
    print(f"pigeond: {message}", file=sys.stderr)
    return code


def _check_endpoint(reactor: object, config: Config, *, serving: bool) -> None:
    from pigeond.service.listeners import server_endpoint

    try:
        server_endpoint(reactor, config.listen)
    except Exception as e:
        if config.listen.startswith("systemd:") and isinstance(e, IndexError | KeyError):
            # socket activation: the socket exists only when systemd starts us
            # (Twisted reads and clears LISTEN_FDS when it is imported)
            if not serving:
                return
            raise ConfigError(
                f"listen: {config.listen!r} needs a socket passed by systemd, and none was"
                " passed; start pigeond through its .socket unit"
            ) from e
        raise ConfigError(f"listen: not a usable endpoint {config.listen!r}: {e}") from e


def check_config_environment(
    config_flag: str | None, env: Mapping[str, str], system_config: str = SYSTEM_CONFIG_FILE
) -> tuple[dict[str, str], str]:
    """The environment ``--check-config`` computes defaults in, and a comment line saying
    whose it is.

    Under systemd (``$STATE_DIRECTORY`` set, as in ``ExecReload=``) and for a user's own
    pigeond it is the process's own; for the latter the note adds that the service's file
    (``system_config``), when it is there, is not read.  Asked about that file by name
    (``--config /etc/pigeond/pigeond.toml``, typically by root) outside systemd, it is the
    service's: what the process's environment does not set comes from
    :data:`SERVICE_ENVIRONMENT`, so ``db`` shows ``/var/lib/pigeond/pigeond.db``, not root's
    ``~/.local/state``.
    """
    if env.get("STATE_DIRECTORY"):
        return dict(env), f"# defaults from: systemd (STATE_DIRECTORY={env['STATE_DIRECTORY']})"
    named = config_flag if config_flag is not None else env.get("PIGEOND_CONFIG") or None
    if named is not None and os.path.normpath(os.path.abspath(named)) == system_config:
        added = {k: v for k, v in SERVICE_ENVIRONMENT.items() if k not in env}
        shown = " ".join(f"{k}={v}" for k, v in added.items())
        return {**env, **added}, (
            f"# defaults from: pigeond.service, as its packaged unit sets them ({shown});"
            " drop-ins are not read (systemctl show -p Environment pigeond)"
        )
    note = "# defaults from: this process's environment (no STATE_DIRECTORY: not pigeond.service)"
    if named is None and os.path.isfile(system_config):
        note += (
            f"\n# not read: {system_config}, the system service's file (a pigeond started by"
            f" hand is the user's); its settings: pigeond --config {system_config} --check-config"
        )
    return dict(env), note


def stdout_is_journal(env: Mapping[str, str], stream: TextIO = sys.stdout) -> bool:
    """Whether standard output is the journal: systemd sets ``JOURNAL_STREAM`` to its device
    and inode for a unit's commands (``ExecReload=`` among them); a terminal or a pipe the
    command's output was sent to is another file."""
    device, colon, inode = env.get("JOURNAL_STREAM", "").partition(":")
    if not (colon and device.isdigit() and inode.isdigit()):
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # closed, or no file behind it
        return False
    return (st.st_dev, st.st_ino) == (int(device), int(inode))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from twisted.internet import reactor

    env: Mapping[str, str] = os.environ
    note = ""
    if args.check_config:
        env, note = check_config_environment(args.config, os.environ)

    def load() -> Config:
        flags = {o.name: getattr(args, o.name) for o in OPTIONS}
        config = load_config(flags, env, args.config)
        _check_endpoint(reactor, config, serving=not args.check_config)
        return config

    try:
        config = load()
    except ConfigError as e:
        return _fail(str(e), EXIT_USAGE)
    if args.check_config:
        if stdout_is_journal(os.environ):
            # systemctl reload's check (ExecReload=): the daemon logs what the reload changed
            return EXIT_OK
        first, _, rest = config.render().partition("\n")
        print("\n".join([first, note, rest]))
        return EXIT_OK
    return run(config, reactor, load, runtime_socket_chosen(args, env, config))


def runtime_socket_chosen(args: argparse.Namespace, env: Mapping[str, str], config: Config) -> bool:
    """Whether ``runtime_socket`` was set (a flag, a variable or the config file), even to
    none, rather than left to its default."""
    option = OPTION_BY_NAME["runtime_socket"]
    if getattr(args, option.name) is not None or option.env_var in env:
        return True
    if config.config_file is None:
        return False
    try:
        return option.name in read_config_file(Path(config.config_file))
    except ConfigError:  # changed since it was loaded: the next reload says what is wrong
        return False


def run(
    config: Config,
    reactor: IReactorCore,
    reload_config: Callable[[], Config],
    runtime_socket_set: bool = True,
) -> int:
    """Serve until SIGTERM/SIGINT; SIGHUP re-reads the configuration.  Unless
    ``runtime_socket_set``, a missing default runtime socket is said (a warning).
    ``reactor`` is the global one: run and stopped here, and adapted to the clock the
    daemon's parts take and to the thread-safe call a signal handler needs."""
    from pigeond.service.daemon import stop_later
    from pigeond.service.logs import start_logging
    from pigeond.service.parts import runtime_socket_warning
    from pigeond.service.reload import config_changes, reload_line
    from pigeond.service.rlimits import apply_open_files_limit
    from pigeond.service.systemd import (
        AlreadyRunning,
        NoNotifier,
        StatusReporter,
        Watchdog,
        instance_lock,
        notifier_from,
        watchdog_period_s,
    )
    from pigeond.service.wiring import build_daemon

    clock = IReactorTime(reactor)
    os.umask(0o077)  # whatever pigeond creates is its user's alone, unless it says otherwise
    lock = instance_lock(config.db, os.environ)
    try:
        lock.acquire()
        daemon = build_daemon(config, clock)
    except AlreadyRunning as e:
        return _fail(str(e), EXIT_RUNTIME)
    except TokenError as e:
        lock.release()
        return _fail(str(e), EXIT_RUNTIME)
    except StorageError as e:
        lock.release()
        return _fail(str(e), EXIT_RUNTIME)
    except OSError as e:
        lock.release()
        return _fail(
            f"cannot open the database {redacted(config.db)}: {e.strerror or e}", EXIT_RUNTIME
        )
    logs = start_logging(config.log_level, config.log_format, clock=clock)
    apply_open_files_limit(config.max_connections)  # each connection costs a descriptor
    notifier = notifier_from(os.environ)
    status = StatusReporter(notifier, lambda: Deferred.fromCoroutine(daemon.status_line()))
    if daemon.ticker is not None:  # on the one tick: no wake-up of its own
        daemon.ticker.add("status", status.report, every_s=STATUS_EVERY_S)
    period = watchdog_period_s(os.environ, os.getpid())
    watchdog = None
    if period is not None:
        tick_s = config.tick_ms / 1000
        watchdog = Watchdog(notifier, clock, period, lambda: daemon.alive(period / 2 + tick_s))
    exit_code = [EXIT_OK]

    async def start() -> None:
        try:
            await daemon.listen()
        except Exception as e:
            print(f"pigeond: cannot listen on {config.listen}: {e}", file=sys.stderr)
            exit_code[0] = EXIT_RUNTIME
            reactor.stop()
            return
        daemon.listen_runtime()  # after listen: the first "listening on" line is listen's
        warning = runtime_socket_warning(config, os.environ, runtime_socket_set)
        if warning is not None:
            log.warn("{warning}", warning=warning)
        daemon.start_delivery()
        settle_garbage_collector()
        notifier.notify("READY=1")
        if not isinstance(notifier, NoNotifier):  # no systemd, no one to show a status to
            status.start()
        if watchdog is not None:
            watchdog.start()

    def reload() -> None:
        notifier.notify("RELOADING=1")
        try:
            new = reload_config()
        except ConfigError as e:
            log.error("reload refused, settings unchanged: {error}", error=str(e))
        else:
            warns, line = reload_line(config_changes(daemon.config, new))
            daemon.reload(new)
            # said before a new log level applies: raised to warn, it would hide the line
            (log.warn if warns else log.info)("{line}", line=line)
            logs.set_level(new.log_level)
        notifier.notify("READY=1")

    def shutting_down() -> Deferred[None]:
        notifier.notify("STOPPING=1")
        status.stop()
        if watchdog is not None:
            watchdog.stop()
        return stop_later(daemon)

    # installed before READY=1 can be sent: a SIGHUP right after it must reload, not kill
    from_threads = IReactorFromThreads(reactor)
    signal.signal(signal.SIGHUP, lambda signum, frame: from_threads.callFromThread(reload))
    reactor.addSystemEventTrigger("before", "shutdown", shutting_down)
    reactor.callWhenRunning(lambda: Deferred.fromCoroutine(start()))
    reactor.run()
    lock.release()
    return exit_code[0]


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
