"""Where settings come from: flag > ``PIGEOND_<OPTION>`` environment variable > TOML
file > default.  A variable set to the empty string counts as set
(``PIGEOND_OPENCODE_URL=`` turns the arbiter off)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from pigeond.config.checks import ConfigError
from pigeond.config.options import (
    OPTION_BY_NAME,
    OPTIONS,
    Config,
    Option,
    default_daemon_name,
    default_db_path,
    default_runtime_socket,
    default_token_path,
)
from pigeond.credentials import BasicAuth, PasswordFileError, read_password_file
from pigeond.db_url import (
    PasswordOnCommandLine,
    has_password,
    is_postgres_url,
    password_on_command_line,
)


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


def user_config_file(env: Mapping[str, str]) -> Path:
    """The user's own config file: ``$XDG_CONFIG_HOME/pigeond/pigeond.toml``, else
    ``~/.config/pigeond/pigeond.toml``."""
    xdg = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(xdg) / "pigeond" / "pigeond.toml"


def find_config_file(flag_value: str | None, env: Mapping[str, str]) -> Path | None:
    """The config file to read: named by ``--config`` or ``PIGEOND_CONFIG`` (then it must
    exist; an empty ``PIGEOND_CONFIG`` means none), else the user's own when it is there.

    Never the system service's file unless named: a pigeond started by hand is the
    user's, and with the service's file it would take the service's port and settings
    (``pigeond.service`` names its file with ``PIGEOND_CONFIG``)."""
    if flag_value is not None:
        return Path(flag_value)
    if "PIGEOND_CONFIG" in env:
        return Path(env["PIGEOND_CONFIG"]) if env["PIGEOND_CONFIG"] else None
    own = user_config_file(env)
    return own if own.is_file() else None


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


def db_password(db: str, password_file: str) -> str:
    """The password ``password_file`` holds for ``db`` (a PostgreSQL URL); "" for none.
    ConfigError when it cannot be read, or ``db`` carries a password of its own too."""
    if not password_file or not is_postgres_url(db):
        return ""
    if has_password(db):
        raise ConfigError("db carries a password and db_password_file names one too: keep one")
    try:
        return read_password_file(password_file)
    except PasswordFileError as e:
        raise ConfigError(str(e)) from None


OPENCODE_PASSWORD_VARIABLES = ("OPENCODE_PASSWORD", "OPENCODE_SERVER_PASSWORD")
"""Where opencode itself reads its server password, the first set winning."""


def opencode_auth(env: Mapping[str, str], password_file: str) -> BasicAuth | None:
    """The Basic auth pigeond uses with opencode: the password from opencode's own
    variables (:data:`OPENCODE_PASSWORD_VARIABLES`), else from ``password_file``; the
    user from ``OPENCODE_SERVER_USERNAME`` (unset or empty: ``opencode``).  None: no
    password anywhere.  ConfigError when the file cannot be used."""
    user = env.get("OPENCODE_SERVER_USERNAME") or "opencode"
    for variable in OPENCODE_PASSWORD_VARIABLES:
        if env.get(variable):
            return BasicAuth(user, env[variable], source=variable)
    if not password_file:
        return None
    try:
        password = read_password_file(password_file, "opencode_password_file")
    except PasswordFileError as e:
        raise ConfigError(str(e)) from None
    return BasicAuth(user, password, source=f"opencode_password_file {password_file}")


def load_config(
    flags: Mapping[str, str | None], env: Mapping[str, str], config_path: str | None = None
) -> Config:
    """Merge the sources; ``flags`` maps option names to the raw flag text (None = not given).

    A ``--db`` with a password is refused (a command line is every local user's to
    read); one in the environment or the config file, both the user's own, is taken."""
    try:
        password_on_command_line(flags.get("db"))
    except PasswordOnCommandLine as e:
        raise ConfigError(str(e)) from None
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
        if option.name in values:
            option.validate(values[option.name])
    values["db_password"] = db_password(values["db"], values.get("db_password_file", ""))
    if not values.get("token_file"):
        values["token_file"] = default_token_path(values["db"], env)
    if not values.get("daemon_name"):
        values["daemon_name"] = default_daemon_name()
    auth = opencode_auth(env, values.get("opencode_password_file", ""))
    known = {f.name for f in fields(Config)}
    return Config(
        **{k: v for k, v in values.items() if k in known},
        opencode_auth=auth,
        config_file=str(path) if path is not None else None,
    )
