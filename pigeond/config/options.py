"""Every option of pigeond, declared once: its name, type, default, help and check.

:class:`Config` holds the settings; each option is one field made by
:func:`option`, and :data:`OPTIONS` is derived from those fields.  The flag
(``--tick-ms``), the variable (``PIGEOND_TICK_MS``), the file key, ``--help``,
``--check-config``, docs/reference/configuration.md and ``packaging/pigeond.toml`` all come
from (or are tested against) that one declaration, so they cannot drift.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar, get_origin, get_type_hints

from pigeond.config.checks import (
    Check,
    between,
    daemon_name,
    database,
    group,
    http_url,
    nonempty,
    one_of,
    uids,
    words,
)
from pigeond.credentials import BasicAuth
from pigeond.db_url import is_postgres_url, redacted, with_password

T = TypeVar("T")


def option(default: T, help: str, check: Check | None = None) -> T:
    """A :class:`Config` field that is an option (``help`` is what ``--help`` says)."""
    return field(default=default, metadata={"help": help, "check": check})


@dataclass(frozen=True, slots=True)
class Option:
    name: str
    kind: type
    default: Any
    help: str
    check: Check | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env_var(self) -> str:
        return "PIGEOND_" + self.name.upper()

    def validate(self, value: Any) -> None:
        if self.check is not None:
            self.check(self.name, value)


@dataclass(frozen=True, slots=True)
class Config:
    listen: str = option(
        "tcp:4097:interface=127.0.0.1", "Twisted server endpoint to listen on", nonempty
    )
    db: str = option(
        "",
        "SQLite database file, or a postgresql:// URL (several daemons, one database)",
        database,
    )
    db_password_file: str = option(
        "",
        "a file holding the password of a postgresql:// db (its first line; refused unless only"
        " its owner may read it), so the password is never on a command line; empty: none"
        " (libpq's ~/.pgpass and service files work too)",
    )
    opencode_url: str = option(
        "http://127.0.0.1:4096", "opencode serve base URL; empty disables delivery", http_url
    )
    opencode_password_file: str = option(
        "",
        "a file holding opencode's server password (its first line; refused unless only its"
        " owner may read it), for HTTP Basic auth as user 'opencode' (opencode 2.x always"
        " asks for one); OPENCODE_PASSWORD or OPENCODE_SERVER_PASSWORD in pigeond's"
        " environment wins; empty: none",
    )
    tick_ms: int = option(500, "arbiter tick interval in ms", between(10, 60_000))
    max_body_bytes: int = option(
        256 * 1024, "largest accepted request body in bytes", between(1024, 64 * 1024 * 1024)
    )
    handoff_timeout_s: float = option(
        30.0, "deadline for one call to opencode in seconds", between(0.1, 3600)
    )
    registry_ttl_s: float = option(
        300.0, "how long a session's directory is cached in seconds", between(0, 86_400)
    )
    max_session_lookups: int = option(
        8,
        "most session lookups (GET /session/<id>) at opencode at once; a send whose target"
        " cannot be looked up now is accepted unchecked (target_checked false)",
        between(1, 10_000),
    )
    target_check_wait_s: float = option(
        3.0,
        "how long a send waits for opencode to say whether its target exists, in seconds;"
        " then it is accepted unchecked (target_checked false)",
        between(0.1, 60),
    )
    max_attempts: int = option(
        10, "failed attempts before a message is marked failed", between(1, 1000)
    )
    delivery: str = option(
        "turn",
        "turn: wait for each turn to end before the next hand-off; call: not",
        one_of(("turn", "call")),
    )
    turn_timeout_s: float = option(
        600.0, "longest wait for a target's turn to end, in seconds", between(0.1, 86_400)
    )
    busy_window_s: float = option(
        5.0,
        "a hand-off with no busy status within this many seconds started no turn",
        between(0.05, 600),
    )
    status_poll_s: float = option(
        1.0, "how often to poll session status while the event stream is down", between(0.05, 60)
    )
    batch_max: int = option(10, "most messages handed over in one prompt", between(1, 100))
    verify_grace_s: float = option(
        60.0, "how long a hand-off may stay unseen in the transcript", between(0.1, 86_400)
    )
    verify_interval_s: float = option(
        2.0, "how often a target's transcript is checked", between(0.05, 3600)
    )
    sender_proof_timeout_s: float = option(
        10.0,
        "how long a send by an agent's pigeond tool may wait to be found in its sender's"
        " transcript before it goes on marked unverified (it is not handed off meanwhile)",
        between(0.5, 600),
    )
    max_requeues: int = option(
        3, "times an unseen hand-off is queued again before it fails", between(0, 100)
    )
    outage_retry_s: float = option(
        30.0,
        "retry interval while opencode is unreachable or cannot take a target's messages"
        " (its folder is missing); an unreachable opencode is also asked every 2 s at most,"
        " and delivery resumes as soon as it answers",
        between(0.05, 3600),
    )
    default_ttl_s: int = option(
        24 * 3600, "time to live of a message without ttl_s, in seconds", between(1, 30 * 86_400)
    )
    reply_within_s: int = option(
        3600,
        "time a target has to reply to a send that expects one without reply_within_s,"
        " counted from the hand-off; a reminder, then the sender is told",
        between(1, 30 * 86_400),
    )
    thread_budget_tokens: int = option(
        0,
        "tokens the turns of one thread's messages may use (recorded from the targets'"
        " transcripts) before its next message is held for a person; 0: no budget",
        between(0, 10**15),
    )
    thread_budget_cost: float = option(
        0.0,
        "US dollars the turns of one thread's messages may cost (as opencode prices them;"
        " a Claude Code turn's cost is unknown) before its next message is held for a"
        " person; 0: no budget",
        between(0, 1_000_000_000),
    )
    stop_timeout_s: float = option(
        10.0, "longest wait for hand-offs in flight when stopping", between(0, 600)
    )
    batch_max_bytes: int = option(
        1024 * 1024,
        "most bytes of envelopes handed over in one prompt (one larger message goes alone)",
        between(1024, 64 * 1024 * 1024),
    )
    inbox_max_bytes: int = option(
        1024 * 1024,
        "most bytes of messages (as JSON) in one GET /swarm/inbox page; one larger comes alone",
        between(1024, 64 * 1024 * 1024),
    )
    request_timeout_s: float = option(
        30.0,
        "deadline for a whole request (headers and body) to arrive; trickling cannot extend it",
        between(0.5, 3600),
    )
    max_connections: int = option(
        512,
        "most client connections at once; beyond it the longest-waiting idle one is closed",
        between(1, 1_000_000),
    )
    retention_days: float = option(
        30.0, "done messages older than this are pruned; 0 keeps everything", between(0, 36_500)
    )
    auth: str = option(
        "token",
        "token: TCP clients need the bearer token; none: anyone who can connect may send (unsafe)",
        one_of(("token", "none")),
    )
    daemon_name: str = option(
        "",
        "this daemon's name in the routes of a database several daemons share (PostgreSQL);"
        " default: the host's name",
        daemon_name,
    )
    token_file: str = option(
        "",
        "the bearer token's file, created (mode 0600) at first start; default: 'token' beside db",
        nonempty,
    )
    runtime_socket: str = option(
        "", "extra Unix socket clients prefer (folder mode 0700); empty: none"
    )
    allow_uids: tuple[str, ...] = option(
        (),
        "user ids besides pigeond's own that may send over a Unix socket (comma-separated)",
        uids,
    )
    allow_group: str = option(
        "", "members of this group may send over a Unix socket; empty: none", group
    )
    allow_origins: tuple[str, ...] = option(
        (), "browser origins whose requests are accepted (comma-separated); empty: none", words
    )
    allow_hosts: tuple[str, ...] = option(
        (),
        "Host header names accepted besides loopback addresses and localhost (comma-separated)",
        words,
    )
    max_queued_per_target: int = option(
        1000,
        "most queued messages per target before sends get 429; 0: no limit",
        between(0, 10_000_000),
    )
    sender_rate_per_s: float = option(
        10.0,
        "messages (each channel copy one) per second one sender (the from field) may keep"
        " sending (token bucket); 0: no limit",
        between(0, 1_000_000),
    )
    sender_burst: int = option(
        100,
        "messages one sender may send at once before the rate applies; 0: no limit",
        between(0, 10_000_000),
    )
    caller_rate_per_s: float = option(
        40.0,
        "messages (each channel copy one) per second one caller may keep sending, whatever"
        " its from: an agent process, a login session, or every TCP client together; 0: no"
        " limit",
        between(0, 1_000_000),
    )
    caller_burst: int = option(
        400,
        "messages (each channel copy one) one caller may send at once before its rate"
        " applies; 0: no limit",
        between(0, 10_000_000),
    )
    max_queued_bytes: int = option(
        256 * 1024 * 1024,
        "most payload bytes all undelivered messages may hold (each channel copy counted)"
        " before sends get 507; 0: no limit",
        between(0, 10**15),
    )
    max_channel_members: int = option(
        32,
        "most members one channel may have; a join past it gets 409 (each member is a copy)",
        between(1, 10_000),
    )
    max_hops_per_thread: int = option(
        12,
        "messages agents may send in a row in one thread without a person's own prompt;"
        " the next is held until a person releases it; 0: no limit",
        between(0, 1_000_000),
    )
    max_pair_messages_per_minute: int = option(
        30,
        "messages one session may send another in any minute; the next is held until a"
        " person releases it; 0: no limit",
        between(0, 100_000),
    )
    max_repeats_per_pair: int = option(
        16,
        "near-identical messages two sessions may exchange within repeat_window_s; the next"
        " is held until a person releases it; 0: no limit",
        between(0, 100),
    )
    repeat_window_s: int = option(
        600,
        "the window of max_repeats_per_pair, in seconds; 0: no repeat brake",
        between(0, 86_400),
    )
    log_level: str = option(
        "info", "debug, info, warn or error", one_of(("debug", "info", "warn", "error"))
    )
    log_format: str = option("text", "text (one line per event) or json", one_of(("text", "json")))
    opencode_auth: BasicAuth | None = None
    config_file: str | None = None
    # read from db_password_file at load; never shown, never compared in a reload's line
    db_password: str = field(default="", repr=False)

    @property
    def connect_db(self) -> str:
        """``db`` as the storage opens it: with the password of ``db_password_file``, in
        memory only (:func:`pigeond.db_url.with_password`)."""
        if self.db_password and is_postgres_url(self.db):
            return with_password(self.db, self.db_password)
        return self.db

    @property
    def arbiter_enabled(self) -> bool:
        return self.opencode_url != ""

    def render(self) -> str:
        """The effective settings as TOML lines (no password is ever shown: opencode's,
        or one in a PostgreSQL URL)."""
        lines = [f"# config file: {self.config_file or '(none)'}"]
        for option in OPTIONS:
            lines.append(f"{option.name} = {shown_value(option.name, getattr(self, option.name))}")
        lines.append("# opencode auth: " + shown_auth(self.opencode_auth))
        return "\n".join(lines)


def shown_value(name: str, value: object) -> str:
    """An option's value as ``--check-config`` and the reload's log line show it: TOML, a
    PostgreSQL URL's password hidden."""
    if name == "db" and isinstance(value, str):
        value = redacted(value)
    return toml_value(value)


def shown_auth(auth: BasicAuth | None) -> str:
    """opencode's credentials as they may be shown: the user's name, never the password."""
    return f"basic, user {auth.username!r} ({auth.source})" if auth else "none"


def toml_value(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, str):
        # a JSON string is a valid TOML basic string, control characters escaped
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    return str(value)


def _declared_options() -> tuple[Option, ...]:
    hints = get_type_hints(Config)
    declared = []
    for f in fields(Config):
        if "help" not in f.metadata:
            continue  # not an option: opencode_auth, config_file, db_password
        kind = get_origin(hints[f.name]) or hints[f.name]
        declared.append(Option(f.name, kind, f.default, f.metadata["help"], f.metadata["check"]))
    return tuple(declared)


OPTIONS: tuple[Option, ...] = _declared_options()
# Every option's default: what components fall back to (never a second copy of a value).
DEFAULTS = Config()
OPTION_BY_NAME = {o.name: o for o in OPTIONS}


def default_db_path(env: Mapping[str, str]) -> str:
    state_dirs = env.get("STATE_DIRECTORY")
    if state_dirs:
        return str(Path(state_dirs.split(":")[0]) / "pigeond.db")
    xdg = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local/state")
    return str(Path(xdg) / "pigeond" / "pigeond.db")


def default_daemon_name() -> str:
    """The host's name, cut to what ``daemon_name`` allows ("pigeond" if it has none)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:128].lstrip("._-")
    return name or "pigeond"


def default_token_path(db: str, env: Mapping[str, str]) -> str:
    """The bearer token lives beside the database unless ``token_file`` says otherwise; a
    PostgreSQL database has no folder, so then in the state folder (where the default
    database would be): daemons on several hosts may share one token file's contents."""
    if is_postgres_url(db):
        return str(Path(default_db_path(env)).parent / "token")
    return str(Path(db).parent / "token")


def default_runtime_socket(env: Mapping[str, str]) -> str:
    """The Unix socket clients prefer: in the user's private runtime folder, or in the
    system service's ``RuntimeDirectory``; none when neither is known."""
    runtime_dirs = env.get("RUNTIME_DIRECTORY")
    if runtime_dirs and env.get("STATE_DIRECTORY"):
        return str(Path(runtime_dirs.split(":")[0]) / "pigeond.sock")
    xdg_runtime = env.get("XDG_RUNTIME_DIR")
    if xdg_runtime:
        return str(Path(xdg_runtime) / "pigeond" / "pigeond.sock")
    return ""
