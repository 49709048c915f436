"""Unit tests of :func:`pigeond.config.load_config`: sources, precedence, checks, rendering."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from pigeond.config import (
    DEFAULTS,
    OPTIONS,
    Config,
    ConfigError,
    Option,
    find_config_file,
    load_config,
)
from pigeond.credentials import BasicAuth
from pigeond.service.main import check_config_environment


def base_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment isolated from the real user: HOME in tmp, no config file."""
    env = {"HOME": str(home), "PIGEOND_CONFIG": ""}
    env.update(extra)
    return env


def write_toml(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load(
    env: Mapping[str, str],
    flags: Mapping[str, str | None] | None = None,
    config_path: str | None = None,
) -> Config:
    return load_config(flags or {}, env, config_path)


# --- defaults -----------------------------------------------------------------


def test_defaults_without_any_source(tmp_path: Path) -> None:
    """With no flag, variable or file every option has its documented default."""
    config = load(base_env(tmp_path))
    assert config.listen == "tcp:4097:interface=127.0.0.1"
    assert config.opencode_url == "http://127.0.0.1:4096"
    assert config.tick_ms == 500
    assert config.arbiter_enabled is True
    assert config.opencode_auth is None
    assert config.config_file is None


def test_all_flags_none_means_defaults(tmp_path: Path) -> None:
    """A flags mapping whose values are all None (argparse's 'not given') changes nothing."""
    flags: dict[str, str | None] = {o.name: None for o in OPTIONS}
    assert load(base_env(tmp_path), flags) == load(base_env(tmp_path))


# --- precedence: flag > env > file > default ----------------------------------

PRECEDENCE_CASES = [
    # option, file value (TOML literal), env value, flag value, parsed env, parsed flag
    ("listen", '"tcp:1111"', "tcp:2222", "tcp:3333", "tcp:2222", "tcp:3333"),
    (
        "opencode_url",
        '"http://file.example:1"',
        "http://env.example:2",
        "http://flag.example:3",
        "http://env.example:2",
        "http://flag.example:3",
    ),
    ("tick_ms", "111", "222", "333", 222, 333),
]
PRECEDENCE_IDS = [case[0] for case in PRECEDENCE_CASES]


@pytest.mark.parametrize(
    ("name", "file_literal", "env_value", "flag_value", "env_parsed", "flag_parsed"),
    PRECEDENCE_CASES,
    ids=PRECEDENCE_IDS,
)
def test_flag_beats_env_and_file(
    tmp_path: Path,
    name: str,
    file_literal: str,
    env_value: str,
    flag_value: str,
    env_parsed: object,
    flag_parsed: object,
) -> None:
    """A flag wins over both the environment variable and the file."""
    cfg = write_toml(tmp_path / "p.toml", f"{name} = {file_literal}\n")
    env = base_env(tmp_path, PIGEOND_CONFIG=str(cfg), **{f"PIGEOND_{name.upper()}": env_value})
    assert getattr(load(env, {name: flag_value}), name) == flag_parsed


@pytest.mark.parametrize(
    ("name", "file_literal", "env_value", "flag_value", "env_parsed", "flag_parsed"),
    PRECEDENCE_CASES,
    ids=PRECEDENCE_IDS,
)
def test_env_beats_file(
    tmp_path: Path,
    name: str,
    file_literal: str,
    env_value: str,
    flag_value: str,
    env_parsed: object,
    flag_parsed: object,
) -> None:
    """The PIGEOND_<OPTION> variable wins over the file when no flag is given."""
    cfg = write_toml(tmp_path / "p.toml", f"{name} = {file_literal}\n")
    env = base_env(tmp_path, PIGEOND_CONFIG=str(cfg), **{f"PIGEOND_{name.upper()}": env_value})
    assert getattr(load(env), name) == env_parsed


@pytest.mark.parametrize(
    ("name", "literal", "expected"),
    [
        ("listen", '"unix:/run/p.sock:mode=600"', "unix:/run/p.sock:mode=600"),
        ("opencode_url", '"http://file.example:1"', "http://file.example:1"),
        ("tick_ms", "111", 111),
    ],
    ids=["listen", "opencode_url", "tick_ms"],
)
def test_file_beats_default(tmp_path: Path, name: str, literal: str, expected: object) -> None:
    """A key in the TOML file overrides the built-in default."""
    cfg = write_toml(tmp_path / "p.toml", f"{name} = {literal}\n")
    config = load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))
    assert getattr(config, name) == expected
    assert config.config_file == str(cfg)


def private_files(directory: Path, *names: str) -> tuple[str, str, str]:
    """Three password files only their owner may read (a password file is read at load)."""
    paths = []
    for name in names:
        path = directory / name
        path.write_text("pw\n", encoding="utf-8")
        path.chmod(0o600)
        paths.append(str(path))
    first, second, third = paths
    return first, second, third


def test_every_option_has_file_key_env_var_and_flag(tmp_path: Path) -> None:
    """Every option is settable by its `_` file key, its PIGEOND_ variable and its flag."""
    samples = {
        "listen": ("tcp:1", "tcp:2", "tcp:3"),
        "db": (str(tmp_path / "1.db"), str(tmp_path / "2.db"), str(tmp_path / "3.db")),
        "db_password_file": ("/p/1", "/p/2", "/p/3"),  # read only for a postgresql:// db
        "opencode_url": ("http://h:1", "http://h:2", "http://h:3"),
        "opencode_password_file": private_files(tmp_path, "o1", "o2", "o3"),  # read at load
        "tick_ms": ("101", "102", "103"),
        "max_body_bytes": ("2001", "2002", "2003"),
        "handoff_timeout_s": ("1.5", "2.5", "3.5"),
        "registry_ttl_s": ("11", "12", "13"),
        "max_attempts": ("4", "5", "6"),
        "delivery": ("call", "turn", "call"),
        "turn_timeout_s": ("7.5", "8.5", "9.5"),
        "busy_window_s": ("0.5", "1.5", "2.5"),
        "status_poll_s": ("0.25", "0.5", "0.75"),
        "batch_max": ("2", "3", "4"),
        "verify_grace_s": ("5", "6", "7"),
        "verify_interval_s": ("0.5", "1", "2"),
        "max_requeues": ("0", "1", "2"),
        "sender_proof_timeout_s": ("1", "2", "3"),
        "outage_retry_s": ("3", "4", "5"),
        "default_ttl_s": ("60", "120", "180"),
        "reply_within_s": ("30", "90", "600"),
        "thread_budget_tokens": ("0", "50000", "7"),
        "thread_budget_cost": ("0.5", "0", "12.25"),
        "stop_timeout_s": ("1", "2", "3"),
        "max_hops_per_thread": ("0", "5", "40"),
        "log_level": ("debug", "warn", "error"),
        "log_format": ("json", "text", "json"),
        "batch_max_bytes": ("2048", "4096", "8192"),
        "inbox_max_bytes": ("2048", "4096", "8192"),
        "request_timeout_s": ("1.5", "2.5", "3.5"),
        "max_connections": ("10", "20", "30"),
        "max_session_lookups": ("1", "4", "64"),
        "target_check_wait_s": ("0.5", "8", "20"),
        "retention_days": ("0", "7", "1.5"),
        "auth": ("none", "token", "none"),
        "token_file": ("/t/1", "/t/2", "/t/3"),
        "runtime_socket": ("/r/1.sock", "", "/r/3.sock"),
        "allow_uids": ("1000", "1001,1002", "7"),
        "allow_group": ("root", "daemon", "bin"),
        "allow_origins": ("http://a.example", "http://b.example, http://c.example", ""),
        "allow_hosts": ("a.internal", "b.internal", "c.internal,d.internal"),
        "max_queued_per_target": ("0", "5", "6"),
        "sender_rate_per_s": ("0.5", "0", "2"),
        "sender_burst": ("1", "2", "0"),
        "caller_rate_per_s": ("0.5", "0", "80"),
        "caller_burst": ("1", "0", "800"),
        "max_queued_bytes": ("0", "1048576", "7"),
        "max_channel_members": ("2", "3", "64"),
        "max_pair_messages_per_minute": ("0", "5", "120"),
        "max_repeats_per_pair": ("1", "0", "32"),
        "repeat_window_s": ("60", "0", "3600"),
        "daemon_name": ("host-a", "host-b", "build.box"),
    }
    assert set(samples) == {o.name for o in OPTIONS}

    def expected(option: Option, raw: str) -> object:
        if option.kind is tuple:
            return tuple(item.strip() for item in raw.split(",") if item.strip())
        return option.kind(raw)

    for option in OPTIONS:
        from_file, from_env, from_flag = samples[option.name]
        literal = f'"{from_file}"' if option.kind in (str, tuple) else from_file
        cfg = write_toml(tmp_path / f"{option.name}.toml", f"{option.name} = {literal}\n")
        env = base_env(tmp_path, PIGEOND_CONFIG=str(cfg))
        assert getattr(load(env), option.name) == expected(option, from_file), option.name
        env[option.env_var] = from_env
        assert getattr(load(env), option.name) == expected(option, from_env), option.name
        got = getattr(load(env, {option.name: from_flag}), option.name)
        assert got == expected(option, from_flag), option.name
        assert option.flag == "--" + option.name.replace("_", "-")


def test_empty_env_var_counts_as_set_and_disables_arbiter(tmp_path: Path) -> None:
    """PIGEOND_OPENCODE_URL="" is a value (beating the file) and turns the arbiter off."""
    cfg = write_toml(tmp_path / "p.toml", 'opencode_url = "http://file.example:1"\n')
    config = load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg), PIGEOND_OPENCODE_URL=""))
    assert config.opencode_url == ""
    assert config.arbiter_enabled is False


def test_empty_flag_disables_arbiter(tmp_path: Path) -> None:
    """--opencode-url "" beats a non-empty variable and disables the arbiter."""
    env = base_env(tmp_path, PIGEOND_OPENCODE_URL="http://env.example:2")
    config = load(env, {"opencode_url": ""})
    assert config.arbiter_enabled is False


# --- db default -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "db"),
    [
        pytest.param(
            {"STATE_DIRECTORY": "/var/lib/pigeond", "XDG_STATE_HOME": "/home/u/xdg-state"},
            "/var/lib/pigeond/pigeond.db",
            id="STATE_DIRECTORY-beats-XDG_STATE_HOME",
        ),
        pytest.param(
            {"STATE_DIRECTORY": "/var/lib/a:/var/lib/b"},
            "/var/lib/a/pigeond.db",
            id="first-of-several-STATE_DIRECTORY",
        ),
        pytest.param(
            {"XDG_STATE_HOME": "/home/u/xdg-state"},
            "/home/u/xdg-state/pigeond/pigeond.db",
            id="XDG_STATE_HOME",
        ),
        pytest.param(
            {"HOME": "/home/u"}, "/home/u/.local/state/pigeond/pigeond.db", id="HOME-alone"
        ),
    ],
)
def test_db_default_follows_the_state_folders(tmp_path: Path, env: dict[str, str], db: str) -> None:
    """Without --db the database is in systemd's STATE_DIRECTORY (the first of several),
    else in $XDG_STATE_HOME/pigeond, else in ~/.local/state/pigeond."""
    assert load(base_env(tmp_path, **env)).db == db


def test_db_flag_beats_state_directory(tmp_path: Path) -> None:
    """An explicit --db is used even when STATE_DIRECTORY is set."""
    env = base_env(tmp_path, STATE_DIRECTORY=str(tmp_path / "state"))
    assert load(env, {"db": str(tmp_path / "mine.db")}).db == str(tmp_path / "mine.db")


def test_load_config_does_not_create_db_folders(tmp_path: Path) -> None:
    """Loading (and so --check-config) has no side effect on the file system."""
    env = base_env(tmp_path, XDG_STATE_HOME=str(tmp_path / "xdg-state"))
    load(env)
    assert not (tmp_path / "xdg-state").exists()


# --- config file discovery -----------------------------------------------------


def test_discovery_finds_xdg_config_file(tmp_path: Path) -> None:
    """With PIGEOND_CONFIG unset, $XDG_CONFIG_HOME/pigeond/pigeond.toml is read."""
    cfg = write_toml(tmp_path / "xdg" / "pigeond" / "pigeond.toml", "tick_ms = 42\n")
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    config = load(env)
    assert config.tick_ms == 42
    assert config.config_file == str(cfg)


def test_discovery_falls_back_to_home_dot_config(tmp_path: Path) -> None:
    """With XDG_CONFIG_HOME unset, ~/.config/pigeond/pigeond.toml is read."""
    cfg = write_toml(tmp_path / ".config" / "pigeond" / "pigeond.toml", "tick_ms = 43\n")
    assert find_config_file(None, {"HOME": str(tmp_path)}) == cfg


def test_pigeond_config_beats_xdg_file(tmp_path: Path) -> None:
    """$PIGEOND_CONFIG is read instead of the XDG file."""
    write_toml(tmp_path / "xdg" / "pigeond" / "pigeond.toml", "tick_ms = 42\n")
    named = write_toml(tmp_path / "named.toml", "tick_ms = 77\n")
    env = {
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "PIGEOND_CONFIG": str(named),
    }
    config = load(env)
    assert config.tick_ms == 77
    assert config.config_file == str(named)


def test_config_flag_beats_pigeond_config(tmp_path: Path) -> None:
    """--config PATH is read instead of $PIGEOND_CONFIG."""
    from_env = write_toml(tmp_path / "env.toml", "tick_ms = 77\n")
    from_flag = write_toml(tmp_path / "flag.toml", "tick_ms = 88\n")
    config = load(base_env(tmp_path, PIGEOND_CONFIG=str(from_env)), config_path=str(from_flag))
    assert config.tick_ms == 88
    assert config.config_file == str(from_flag)


def test_empty_pigeond_config_disables_discovery(tmp_path: Path) -> None:
    """PIGEOND_CONFIG="" means 'no file', even when the XDG file exists."""
    write_toml(tmp_path / "xdg" / "pigeond" / "pigeond.toml", "tick_ms = 42\n")
    env = base_env(tmp_path, XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    config = load(env)
    assert config.tick_ms == 500
    assert config.config_file is None


@pytest.mark.parametrize("named_by", ["--config", "PIGEOND_CONFIG"])
def test_missing_named_config_file_is_an_error(tmp_path: Path, named_by: str) -> None:
    """A config file named by --config or PIGEOND_CONFIG that does not exist is an error
    naming the file, not a silent default."""
    missing = str(tmp_path / "nope.toml")
    env, config_path = {
        "--config": (base_env(tmp_path), missing),
        "PIGEOND_CONFIG": (base_env(tmp_path, PIGEOND_CONFIG=missing), None),
    }[named_by]
    with pytest.raises(ConfigError, match="not found") as info:
        load(env, config_path=config_path)
    assert missing in str(info.value)


def test_missing_xdg_file_is_not_an_error(tmp_path: Path) -> None:
    """Discovery only uses files that exist: an empty XDG dir yields no file."""
    (tmp_path / "xdg" / "pigeond").mkdir(parents=True)
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert find_config_file(None, env) is None


def test_a_user_without_a_config_file_gets_the_defaults_even_beside_the_services(
    tmp_path: Path,
) -> None:
    """No file of the user's: no file and the defaults, though the service's file is there
    (--check-config says it was not read, and how to see it)."""
    system = tmp_path / "etc" / "pigeond.toml"
    system.parent.mkdir()
    system.write_text('listen = "tcp:5999:interface=127.0.0.1"\nauth = "none"\n')
    used, note = check_config_environment(None, {"HOME": str(tmp_path)}, system_config=str(system))
    config = load_config({}, used)
    assert (config.config_file, config.listen, config.auth) == (None, DEFAULTS.listen, "token")
    assert note.splitlines()[1] == (
        f"# not read: {system}, the system service's file (a pigeond started by hand is the"
        f" user's); its settings: pigeond --config {system} --check-config"
    )


# --- file errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        pytest.param("tick_ms = 100\nlisten_port = 4097\n", "listen_port", id="unknown"),
        pytest.param('"opencode-url" = "http://h:1"\n', "opencode-url", id="flag-spelling"),
        pytest.param("[server]\nlisten = 'tcp:1'\n", "server", id="table"),
    ],
)
def test_unknown_key_is_a_one_line_error_naming_it(tmp_path: Path, text: str, key: str) -> None:
    """A key that is no option (a typo, the flag's '-' spelling, a TOML table) is a
    ConfigError whose one-line text names the key."""
    cfg = write_toml(tmp_path / "p.toml", text)
    with pytest.raises(ConfigError) as info:
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))
    assert f"unknown key '{key}'" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("line", "key"),
    [
        pytest.param('tick_ms = "500"', "tick_ms", id="string-for-int"),
        pytest.param("tick_ms = true", "tick_ms", id="bool-for-int"),
        pytest.param("tick_ms = 500.0", "tick_ms", id="float-for-int"),
        pytest.param("listen = 4097", "listen", id="int-for-string"),
        pytest.param("handoff_timeout_s = true", "handoff_timeout_s", id="bool-for-float"),
    ],
)
def test_file_value_of_the_wrong_toml_type_is_an_error(tmp_path: Path, line: str, key: str) -> None:
    """A file value whose TOML type is not the option's (a bool is no number, though Python
    says it is an int) is a ConfigError naming the key."""
    cfg = write_toml(tmp_path / "p.toml", line + "\n")
    with pytest.raises(ConfigError, match=f"key '{key}' must be"):
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))


def test_int_accepted_for_float_option(tmp_path: Path) -> None:
    """handoff_timeout_s = 5 (an integer) is accepted and stored as a float."""
    cfg = write_toml(tmp_path / "p.toml", "handoff_timeout_s = 5\n")
    config = load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))
    assert config.handoff_timeout_s == 5.0
    assert isinstance(config.handoff_timeout_s, float)


def test_invalid_toml_is_a_config_error(tmp_path: Path) -> None:
    """A file that is not TOML is a one-line ConfigError naming the file."""
    cfg = write_toml(tmp_path / "p.toml", "tick_ms = = 5\n[[[\n")
    with pytest.raises(ConfigError, match="not valid TOML") as info:
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))
    assert str(cfg) in str(info.value)
    assert "\n" not in str(info.value)


def test_config_path_that_is_a_directory_is_a_config_error(tmp_path: Path) -> None:
    """--config naming a directory is a ConfigError, not an OSError."""
    with pytest.raises(ConfigError, match="cannot read"):
        load(base_env(tmp_path), config_path=str(tmp_path))


# --- value checks --------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["0", "9", "60001", "-5"], ids=["zero", "below-10", "above-60000", "negative"]
)
def test_tick_ms_out_of_range_flag_is_an_error(tmp_path: Path, value: str) -> None:
    """tick_ms must be within 10..60000; 0, 9, 60001 and negatives are rejected."""
    with pytest.raises(ConfigError, match="tick_ms"):
        load(base_env(tmp_path), {"tick_ms": value})


def test_tick_ms_zero_in_file_is_an_error(tmp_path: Path) -> None:
    """tick_ms = 0 in the file is checked like a flag value."""
    cfg = write_toml(tmp_path / "p.toml", "tick_ms = 0\n")
    with pytest.raises(ConfigError, match="tick_ms"):
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))


@pytest.mark.parametrize(
    "url",
    ["ftp://x", "127.0.0.1:4096", "http://", "http://h:99999", "http://h:1/?q=1"],
    ids=["ftp", "no-scheme", "no-host", "bad-port", "query"],
)
def test_bad_opencode_url_is_an_error(tmp_path: Path, url: str) -> None:
    """opencode_url must be an http(s) URL with a host, a valid port and no query."""
    with pytest.raises(ConfigError, match="opencode_url"):
        load(base_env(tmp_path), {"opencode_url": url})


@pytest.mark.parametrize("url", ["http://opencode:s3cret@h:4096", "https://s3cret@h"])
def test_an_opencode_url_with_a_user_or_password_is_an_error(tmp_path: Path, url: str) -> None:
    """A ``user:password@`` in opencode_url is refused, naming where the password goes,
    and the error never repeats it."""
    with pytest.raises(ConfigError, match="opencode_password_file") as raised:
        load(base_env(tmp_path), {"opencode_url": url})
    assert "s3cret" not in str(raised.value)


def test_https_opencode_url_is_accepted(tmp_path: Path) -> None:
    """An https:// opencode URL is valid."""
    config = load(base_env(tmp_path), {"opencode_url": "https://opencode.internal:8443"})
    assert config.opencode_url == "https://opencode.internal:8443"


@pytest.mark.parametrize(
    "value", ["", "fast", "1.5", "0x10"], ids=["empty", "word", "decimal", "hex"]
)
def test_non_integer_env_tick_ms_is_an_error(tmp_path: Path, value: str) -> None:
    """PIGEOND_TICK_MS that is not an integer is a ConfigError naming the variable; set to
    "" it is set, so it is checked too, not ignored."""
    with pytest.raises(ConfigError, match="PIGEOND_TICK_MS"):
        load(base_env(tmp_path, PIGEOND_TICK_MS=value))


def test_env_int_tolerates_surrounding_whitespace(tmp_path: Path) -> None:
    """PIGEOND_TICK_MS=" 250 " is read as 250."""
    assert load(base_env(tmp_path, PIGEOND_TICK_MS=" 250 ")).tick_ms == 250


@pytest.mark.parametrize("value", ["nan", "inf", "-1"], ids=["nan", "inf", "negative"])
def test_non_finite_float_is_an_error(tmp_path: Path, value: str) -> None:
    """handoff_timeout_s of nan, inf or a negative number is out of range."""
    with pytest.raises(ConfigError, match="handoff_timeout_s"):
        load(base_env(tmp_path), {"handoff_timeout_s": value})


@pytest.mark.parametrize("name", ["listen", "db"])
def test_empty_listen_or_db_is_an_error(tmp_path: Path, name: str) -> None:
    """An empty listen or db (e.g. PIGEOND_LISTEN="") is rejected, not replaced by the default."""
    with pytest.raises(ConfigError, match=name):
        load(base_env(tmp_path, **{f"PIGEOND_{name.upper()}": ""}))


def given(
    tmp_path: Path, source: str, name: str, text: str
) -> tuple[dict[str, str], dict[str, str | None], str]:
    """The environment and flags that give option ``name`` the value ``text`` by ``source``
    (``flag``, ``variable``, or ``file`` as a TOML string), and how errors name the source."""
    option = next(o for o in OPTIONS if o.name == name)
    env = base_env(tmp_path)
    if source == "flag":
        return env, {name: text}, option.flag
    if source == "variable":
        return env | {option.env_var: text}, {}, option.env_var
    cfg = write_toml(tmp_path / "p.toml", f'{name} = "{text}"\n')
    return env | {"PIGEOND_CONFIG": str(cfg)}, {}, str(cfg)


@pytest.mark.parametrize(
    ("name", "text"), [("tick_ms", "fast"), ("handoff_timeout_s", "soon")], ids=["int", "float"]
)
@pytest.mark.parametrize("source", ["flag", "variable", "file"])
def test_value_of_the_wrong_type_names_the_option_and_its_source(
    tmp_path: Path, source: str, name: str, text: str
) -> None:
    """A value that is not of the option's type, from a flag, a variable or the file, stops
    pigeond with one line naming the option, where the value came from, and the value."""
    env, flags, where = given(tmp_path, source, name, text)
    with pytest.raises(ConfigError) as info:
        load(env, flags)
    message = str(info.value)
    assert name in message and where in message and repr(text) in message, message
    assert "\n" not in message


# --- auth ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "auth"),
    [
        pytest.param({"OPENCODE_SERVER_USERNAME": "alice"}, None, id="no-password"),
        pytest.param(
            {"OPENCODE_SERVER_PASSWORD": "s3cret"},
            BasicAuth("opencode", "s3cret"),
            id="password-alone",
        ),
        pytest.param(
            {"OPENCODE_SERVER_PASSWORD": "s3cret", "OPENCODE_SERVER_USERNAME": "alice"},
            BasicAuth("alice", "s3cret"),
            id="password-and-user",
        ),
        pytest.param(
            {"OPENCODE_SERVER_PASSWORD": "s3cret", "OPENCODE_SERVER_USERNAME": ""},
            BasicAuth("opencode", "s3cret"),
            id="password-and-empty-user",
        ),
    ],
)
def test_opencode_auth_follows_opencodes_variables(
    tmp_path: Path, env: dict[str, str], auth: BasicAuth | None
) -> None:
    """OPENCODE_SERVER_PASSWORD turns on Basic auth to opencode, as OPENCODE_SERVER_USERNAME
    or (unset or empty) 'opencode'; without a password requests carry no auth."""
    assert load(base_env(tmp_path, **env)).opencode_auth == auth


# --- render ------------------------------------------------------------------------

PASSWORD = "hunter2-Very-Secret-Pa55"


def test_render_never_contains_the_password(tmp_path: Path) -> None:
    """render() names the auth user but never the password."""
    env = base_env(tmp_path, OPENCODE_SERVER_PASSWORD=PASSWORD, OPENCODE_SERVER_USERNAME="bob")
    text = load(env).render()
    assert PASSWORD not in text
    assert "bob" in text
    assert "basic" in text


def test_render_without_auth_says_none(tmp_path: Path) -> None:
    """render() reports 'none' for opencode auth when no password is set."""
    assert "# opencode auth: none" in load(base_env(tmp_path)).render()


def test_render_is_toml_listing_every_option(tmp_path: Path) -> None:
    """render() parses as TOML and round-trips every effective option value."""
    cfg = write_toml(tmp_path / "p.toml", 'listen = "unix:/run/p \\"q\\".sock:mode=600"\n')
    env = base_env(tmp_path, PIGEOND_CONFIG=str(cfg), PIGEOND_OPENCODE_URL="")
    config = load(env, {"tick_ms": "250", "db": str(tmp_path / "back\\slash.db")})
    parsed = tomllib.loads(config.render())
    as_toml = {o.name: getattr(config, o.name) for o in OPTIONS}
    assert parsed == {k: list(v) if isinstance(v, tuple) else v for k, v in as_toml.items()}
    assert parsed["tick_ms"] == 250
    assert parsed["opencode_url"] == ""


def test_render_names_the_config_file(tmp_path: Path) -> None:
    """render() starts with a comment naming the file read, or '(none)'."""
    cfg = write_toml(tmp_path / "p.toml", "tick_ms = 100\n")
    assert (
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))
        .render()
        .startswith(f"# config file: {cfg}")
    )
    assert load(base_env(tmp_path)).render().startswith("# config file: (none)")


def test_list_option_takes_a_toml_array(tmp_path: Path) -> None:
    """A list option is a TOML array in the file (numbers allowed for uids)."""
    cfg = write_toml(tmp_path / "p.toml", 'allow_uids = [1000, "1001"]\nallow_hosts = ["a.b"]\n')
    config = load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))
    assert (config.allow_uids, config.allow_hosts) == (("1000", "1001"), ("a.b",))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("allow_uids", '["alice"]', "numeric user ids"),
        ("allow_group", '"no-such-group-here"', "no group named"),
        ("allow_hosts", '["a b"]', "non-empty words"),
        ("auth", '"basic"', "auth must be one of token, none"),
        ("allow_origins", "7", "must be a list of strings"),
    ],
    ids=["uid-not-numeric", "no-such-group", "host-not-a-word", "unknown-auth", "not-a-list"],
)
def test_bad_access_settings_are_one_line_errors(
    tmp_path: Path, key: str, value: str, message: str
) -> None:
    """A wrong uid, group, host, auth mode or list type stops pigeond with one line."""
    cfg = write_toml(tmp_path / "p.toml", f"{key} = {value}\n")
    with pytest.raises(ConfigError, match=message):
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))


def test_token_file_defaults_to_beside_the_database(tmp_path: Path) -> None:
    """Without token_file, the token lives in the database's folder."""
    config = load(base_env(tmp_path), {"db": str(tmp_path / "x" / "p.db")})
    assert config.token_file == str(tmp_path / "x" / "token")


def test_runtime_socket_defaults(tmp_path: Path) -> None:
    """The user's socket is under XDG_RUNTIME_DIR; the system service's in RUNTIME_DIRECTORY."""
    user = load(base_env(tmp_path, XDG_RUNTIME_DIR="/run/user/1000"))
    assert user.runtime_socket == "/run/user/1000/pigeond/pigeond.sock"
    system = load(
        base_env(tmp_path, RUNTIME_DIRECTORY="/run/pigeond", STATE_DIRECTORY="/var/lib/pigeond")
    )
    assert system.runtime_socket == "/run/pigeond/pigeond.sock"
    assert load(base_env(tmp_path)).runtime_socket == ""


def test_every_option_is_declared_once_as_a_config_field() -> None:
    """OPTIONS is made from Config's fields: same names in order, defaults, and types."""
    option_fields = [f for f in dataclasses.fields(Config) if "help" in f.metadata]
    assert [o.name for o in OPTIONS] == [f.name for f in option_fields]
    defaults = Config()
    for option in OPTIONS:
        assert option.default == getattr(defaults, option.name)
        assert isinstance(option.default, option.kind), option.name
        assert option.help
