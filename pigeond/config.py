"""pigeond's settings: flag > ``PIGEOND_<OPTION>`` environment variable > TOML file > default.

Each option is declared once in :data:`OPTIONS`; the flag, the variable and
the file key are all derived from its name, so the three can never drift.
A variable set to the empty string counts as set (``PIGEOND_OPENCODE_URL=``
turns the arbiter off).
"""

from __future__ import annotations

import grp
import json
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pigeond.credentials import BasicAuth


class ConfigError(ValueError):
    """A setting is wrong; the text is one line fit for the terminal."""


def default_db_path(env: Mapping[str, str]) -> str:
    state_dirs = env.get("STATE_DIRECTORY")
    if state_dirs:
        return str(Path(state_dirs.split(":")[0]) / "pigeond.db")
    xdg = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local/state")
    return str(Path(xdg) / "pigeond" / "pigeond.db")


def default_token_path(db: str) -> str:
    """The bearer token lives beside the database unless ``token_file`` says otherwise."""
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


def _check_url(value: str) -> None:
    if value == "":
        return
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"opencode_url must be an http:// or https:// URL or empty, not {value!r}"
        )
    if parts.query or parts.fragment:
        raise ConfigError("opencode_url must not have a query or fragment")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as e:
        raise ConfigError(f"opencode_url has a bad port: {value!r}") from e


def _nonempty(name: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value == "":
            raise ConfigError(f"{name} must not be empty")

    return check


def _between(name: str, low: float, high: float) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not low <= value <= high:
            raise ConfigError(f"{name} must be between {low:g} and {high:g}, not {value}")

    return check


def _uids(value: Any) -> None:
    for item in value:
        if not item.isascii() or not item.isdigit() or int(item) > 4_294_967_294:
            raise ConfigError(f"allow_uids must list numeric user ids, not {item!r}")


def _names(name: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        for item in value:
            if not item or any(c.isspace() or c == "," for c in item):
                raise ConfigError(f"{name} entries must be non-empty words, not {item!r}")

    return check


def _group(value: Any) -> None:
    if value == "":
        return
    try:
        grp.getgrnam(value)
    except KeyError as e:
        raise ConfigError(f"allow_group: there is no group named {value!r}") from e


def _one_of(name: str, allowed: tuple[str, ...]) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value not in allowed:
            raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")

    return check


@dataclass(frozen=True, slots=True)
class Option:
    name: str
    kind: type
    help: str
    check: Callable[[Any], None] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env_var(self) -> str:
        return "PIGEOND_" + self.name.upper()


OPTIONS: tuple[Option, ...] = (
    Option("listen", str, "Twisted server endpoint to listen on", _nonempty("listen")),
    Option("db", str, "SQLite database file", _nonempty("db")),
    Option("opencode_url", str, "opencode serve base URL; empty disables delivery", _check_url),
    Option("tick_ms", int, "arbiter tick interval in ms", _between("tick_ms", 10, 60_000)),
    Option(
        "max_body_bytes",
        int,
        "largest accepted request body in bytes",
        _between("max_body_bytes", 1024, 64 * 1024 * 1024),
    ),
    Option(
        "handoff_timeout_s",
        float,
        "deadline for one call to opencode in seconds",
        _between("handoff_timeout_s", 0.1, 3600),
    ),
    Option(
        "registry_ttl_s",
        float,
        "how long a session's directory is cached in seconds",
        _between("registry_ttl_s", 0, 86_400),
    ),
    Option(
        "max_attempts",
        int,
        "failed attempts before a message is marked failed",
        _between("max_attempts", 1, 1000),
    ),
    Option(
        "delivery",
        str,
        "turn: wait for each turn to end before the next hand-off; call: not",
        _one_of("delivery", ("turn", "call")),
    ),
    Option(
        "turn_timeout_s",
        float,
        "longest wait for a target's turn to end, in seconds",
        _between("turn_timeout_s", 0.1, 86_400),
    ),
    Option(
        "busy_window_s",
        float,
        "a hand-off with no busy status within this many seconds started no turn",
        _between("busy_window_s", 0.05, 600),
    ),
    Option(
        "status_poll_s",
        float,
        "how often to poll session status while the event stream is down",
        _between("status_poll_s", 0.05, 60),
    ),
    Option(
        "batch_max", int, "most messages handed over in one prompt", _between("batch_max", 1, 100)
    ),
    Option(
        "verify_grace_s",
        float,
        "how long a hand-off may stay unseen in the transcript",
        _between("verify_grace_s", 0.1, 86_400),
    ),
    Option(
        "verify_interval_s",
        float,
        "how often a target's transcript is checked",
        _between("verify_interval_s", 0.05, 3600),
    ),
    Option(
        "max_requeues",
        int,
        "times an unseen hand-off is queued again before it fails",
        _between("max_requeues", 0, 100),
    ),
    Option(
        "outage_retry_s",
        float,
        "retry interval while opencode is unreachable",
        _between("outage_retry_s", 0.05, 3600),
    ),
    Option(
        "default_ttl_s",
        int,
        "time to live of a message without ttl_s, in seconds",
        _between("default_ttl_s", 1, 30 * 86_400),
    ),
    Option(
        "stop_timeout_s",
        float,
        "longest wait for hand-offs in flight when stopping",
        _between("stop_timeout_s", 0, 600),
    ),
    Option(
        "batch_max_bytes",
        int,
        "most bytes of envelopes handed over in one prompt (one larger message goes alone)",
        _between("batch_max_bytes", 1024, 64 * 1024 * 1024),
    ),
    Option(
        "inbox_max_bytes",
        int,
        "most bytes of messages (as JSON) in one GET /swarm/inbox page; one larger comes alone",
        _between("inbox_max_bytes", 1024, 64 * 1024 * 1024),
    ),
    Option(
        "request_timeout_s",
        float,
        "deadline for a whole request (headers and body) to arrive; trickling cannot extend it",
        _between("request_timeout_s", 0.5, 3600),
    ),
    Option(
        "max_connections",
        int,
        "most client connections at once; beyond it the longest-waiting idle one is closed",
        _between("max_connections", 1, 1_000_000),
    ),
    Option(
        "retention_days",
        float,
        "done messages older than this are pruned; 0 keeps everything",
        _between("retention_days", 0, 36_500),
    ),
    Option(
        "auth",
        str,
        "token: TCP clients need the bearer token; none: anyone who can connect may send (unsafe)",
        _one_of("auth", ("token", "none")),
    ),
    Option(
        "token_file",
        str,
        "the bearer token's file, created (mode 0600) at first start; default: 'token' beside db",
        _nonempty("token_file"),
    ),
    Option(
        "runtime_socket",
        str,
        "extra Unix socket clients prefer (folder mode 0700); empty: none",
    ),
    Option(
        "allow_uids",
        tuple,
        "user ids besides pigeond's own that may send over a Unix socket (comma-separated)",
        _uids,
    ),
    Option(
        "allow_group",
        str,
        "members of this group may send over a Unix socket; empty: none",
        _group,
    ),
    Option(
        "allow_origins",
        tuple,
        "browser origins whose requests are accepted (comma-separated); empty: none",
        _names("allow_origins"),
    ),
    Option(
        "allow_hosts",
        tuple,
        "Host header names accepted besides loopback addresses and localhost (comma-separated)",
        _names("allow_hosts"),
    ),
    Option(
        "max_queued_per_target",
        int,
        "most queued messages per target before sends get 429; 0: no limit",
        _between("max_queued_per_target", 0, 10_000_000),
    ),
    Option(
        "sender_rate_per_s",
        float,
        "messages per second one sender may keep sending (token bucket); 0: no limit",
        _between("sender_rate_per_s", 0, 1_000_000),
    ),
    Option(
        "sender_burst",
        int,
        "messages one sender may send at once before the rate applies; 0: no limit",
        _between("sender_burst", 0, 10_000_000),
    ),
    Option(
        "log_level",
        str,
        "debug, info, warn or error",
        _one_of("log_level", ("debug", "info", "warn", "error")),
    ),
    Option(
        "log_format",
        str,
        "text (one line per event) or json",
        _one_of("log_format", ("text", "json")),
    ),
)
OPTION_BY_NAME = {o.name: o for o in OPTIONS}


@dataclass(frozen=True, slots=True)
class Config:
    listen: str = "tcp:4097:interface=127.0.0.1"
    db: str = ""
    opencode_url: str = "http://127.0.0.1:4096"
    tick_ms: int = 500
    max_body_bytes: int = 256 * 1024
    handoff_timeout_s: float = 30.0
    registry_ttl_s: float = 300.0
    max_attempts: int = 10
    delivery: str = "turn"
    turn_timeout_s: float = 600.0
    busy_window_s: float = 5.0
    status_poll_s: float = 1.0
    batch_max: int = 10
    verify_grace_s: float = 60.0
    verify_interval_s: float = 2.0
    max_requeues: int = 3
    outage_retry_s: float = 30.0
    default_ttl_s: int = 24 * 3600
    stop_timeout_s: float = 10.0
    batch_max_bytes: int = 1024 * 1024
    inbox_max_bytes: int = 1024 * 1024
    request_timeout_s: float = 30.0
    max_connections: int = 512
    retention_days: float = 30.0
    auth: str = "token"
    token_file: str = ""
    runtime_socket: str = ""
    allow_uids: tuple[str, ...] = ()
    allow_group: str = ""
    allow_origins: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    max_queued_per_target: int = 1000
    sender_rate_per_s: float = 10.0
    sender_burst: int = 100
    log_level: str = "info"
    log_format: str = "text"
    opencode_auth: BasicAuth | None = None
    config_file: str | None = None

    @property
    def arbiter_enabled(self) -> bool:
        return self.opencode_url != ""

    def render(self) -> str:
        """The effective settings as TOML lines (the password is never shown)."""
        lines = [f"# config file: {self.config_file or '(none)'}"]
        for option in OPTIONS:
            value = getattr(self, option.name)
            lines.append(f"{option.name} = {_toml_value(value)}")
        auth = self.opencode_auth
        lines.append(
            "# opencode auth: "
            + (f"basic, user {auth.username!r} (OPENCODE_SERVER_PASSWORD)" if auth else "none")
        )
        return "\n".join(lines)


def _toml_value(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, str):
        # a JSON string is a valid TOML basic string, control characters escaped
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    return str(value)


def _split_list(raw: str) -> tuple[str, ...]:
    """A comma-separated list from a flag or a variable; the empty string is the empty list."""
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _coerce_text(option: Option, raw: str, source: str) -> Any:
    if option.kind is str:
        return raw
    if option.kind is tuple:
        return _split_list(raw)
    try:
        return option.kind(raw.strip())
    except ValueError as e:
        kind = "an integer" if option.kind is int else "a number"
        raise ConfigError(f"{option.name} from {source} must be {kind}, not {raw!r}") from e


def _check_file_value(option: Option, value: Any, path: str) -> Any:
    if option.kind is tuple:
        if isinstance(value, str):
            return _split_list(value)
        if isinstance(value, list) and all(
            isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in value
        ):
            return tuple(str(v) for v in value)
        raise ConfigError(f"{path}: key '{option.name}' must be a list of strings, not {value!r}")
    ok = (
        isinstance(value, str)
        if option.kind is str
        else isinstance(value, int) and not isinstance(value, bool)
        if option.kind is int
        else isinstance(value, int | float) and not isinstance(value, bool)
    )
    if not ok:
        kind = {str: "a string", int: "an integer", float: "a number"}[option.kind]
        raise ConfigError(f"{path}: key '{option.name}' must be {kind}, not {value!r}")
    return float(value) if option.kind is float else value


def find_config_file(flag_value: str | None, env: Mapping[str, str]) -> Path | None:
    """The config file to read: named by ``--config`` or ``PIGEOND_CONFIG`` (then it must
    exist; an empty ``PIGEOND_CONFIG`` means none), else the user's, else the system's."""
    if flag_value is not None:
        return Path(flag_value)
    if "PIGEOND_CONFIG" in env:
        return Path(env["PIGEOND_CONFIG"]) if env["PIGEOND_CONFIG"] else None
    xdg = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    for candidate in (Path(xdg) / "pigeond" / "pigeond.toml", Path("/etc/pigeond/pigeond.toml")):
        if candidate.is_file():
            return candidate
    return None


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError as e:
        raise ConfigError(f"{path}: config file not found") from e
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from e
    values: dict[str, Any] = {}
    for key, value in data.items():
        option = OPTION_BY_NAME.get(key)
        if option is None:
            raise ConfigError(f"{path}: unknown key '{key}'")
        values[key] = _check_file_value(option, value, str(path))
    return values


def load_config(
    flags: Mapping[str, str | None], env: Mapping[str, str], config_path: str | None = None
) -> Config:
    """Merge the sources; ``flags`` maps option names to the raw flag text (None = not given)."""
    path = find_config_file(config_path, env)
    from_file = read_config_file(path) if path is not None else {}
    values: dict[str, Any] = {
        "db": default_db_path(env),
        "runtime_socket": default_runtime_socket(env),
    }
    for option in OPTIONS:
        flag = flags.get(option.name)
        if flag is not None:
            values[option.name] = _coerce_text(option, flag, option.flag)
        elif option.env_var in env:
            values[option.name] = _coerce_text(option, env[option.env_var], option.env_var)
        elif option.name in from_file:
            values[option.name] = from_file[option.name]
        if option.name in values and option.check is not None:
            option.check(values[option.name])
    if not values.get("token_file"):
        values["token_file"] = default_token_path(values["db"])
    password = env.get("OPENCODE_SERVER_PASSWORD")
    auth = None
    if password:
        auth = BasicAuth(env.get("OPENCODE_SERVER_USERNAME") or "opencode", password)
    known = {f.name for f in fields(Config)}
    return Config(
        **{k: v for k, v in values.items() if k in known},
        opencode_auth=auth,
        config_file=str(path) if path is not None else None,
    )
