"""Unit tests of :func:`pigeond.config.load_config`: sources, precedence, checks, rendering."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from pigeond.config import OPTIONS, Config, ConfigError, Option, find_config_file, load_config
from pigeond.credentials import BasicAuth


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


@pytest.mark.parametrize(
    ("name", "file_literal", "env_value", "flag_value", "env_parsed", "flag_parsed"),
    PRECEDENCE_CASES,
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
)
def test_file_beats_default(tmp_path: Path, name: str, literal: str, expected: object) -> None:
    """A key in the TOML file overrides the built-in default."""
    cfg = write_toml(tmp_path / "p.toml", f"{name} = {literal}\n")
    config = load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))
    assert getattr(config, name) == expected
    assert config.config_file == str(cfg)


def test_every_option_has_file_key_env_var_and_flag(tmp_path: Path) -> None:
    """Every option is settable by its `_` file key, its PIGEOND_ variable and its flag."""
    samples = {
        "listen": ("tcp:1", "tcp:2", "tcp:3"),
        "db": (str(tmp_path / "1.db"), str(tmp_path / "2.db"), str(tmp_path / "3.db")),
        "opencode_url": ("http://h:1", "http://h:2", "http://h:3"),
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
        "outage_retry_s": ("3", "4", "5"),
        "default_ttl_s": ("60", "120", "180"),
        "stop_timeout_s": ("1", "2", "3"),
        "log_level": ("debug", "warn", "error"),
        "log_format": ("json", "text", "json"),
        "batch_max_bytes": ("2048", "4096", "8192"),
        "inbox_max_bytes": ("2048", "4096", "8192"),
        "request_timeout_s": ("1.5", "2.5", "3.5"),
        "max_connections": ("10", "20", "30"),
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


def test_empty_env_var_for_int_option_is_an_error(tmp_path: Path) -> None:
    """PIGEOND_TICK_MS="" is set, so it is checked (and rejected), not ignored."""
    with pytest.raises(ConfigError, match="tick_ms"):
        load(base_env(tmp_path, PIGEOND_TICK_MS=""))


# --- db default -----------------------------------------------------------------


def test_db_default_from_state_directory(tmp_path: Path) -> None:
    """systemd's STATE_DIRECTORY wins: the db is $STATE_DIRECTORY/pigeond.db."""
    env = base_env(
        tmp_path, STATE_DIRECTORY=str(tmp_path / "state"), XDG_STATE_HOME=str(tmp_path / "x")
    )
    assert load(env).db == str(tmp_path / "state" / "pigeond.db")


def test_db_default_uses_first_of_several_state_directories(tmp_path: Path) -> None:
    """STATE_DIRECTORY may list several folders separated by ':'; the first is used."""
    env = base_env(tmp_path, STATE_DIRECTORY=f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert load(env).db == str(tmp_path / "a" / "pigeond.db")


def test_db_default_from_xdg_state_home(tmp_path: Path) -> None:
    """Without STATE_DIRECTORY the db is $XDG_STATE_HOME/pigeond/pigeond.db."""
    env = base_env(tmp_path, XDG_STATE_HOME=str(tmp_path / "xdg-state"))
    assert load(env).db == str(tmp_path / "xdg-state" / "pigeond" / "pigeond.db")


def test_db_default_falls_back_to_home(tmp_path: Path) -> None:
    """Without STATE_DIRECTORY or XDG_STATE_HOME the db is under ~/.local/state/pigeond."""
    expected = tmp_path / ".local" / "state" / "pigeond" / "pigeond.db"
    assert load(base_env(tmp_path)).db == str(expected)


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


def test_missing_explicit_config_flag_file_is_an_error(tmp_path: Path) -> None:
    """A --config naming a file that does not exist is an error, not a silent default."""
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="not found") as info:
        load(base_env(tmp_path), config_path=str(missing))
    assert str(missing) in str(info.value)


def test_missing_pigeond_config_file_is_an_error(tmp_path: Path) -> None:
    """A PIGEOND_CONFIG naming a file that does not exist is an error."""
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="not found"):
        load(base_env(tmp_path, PIGEOND_CONFIG=str(missing)))


def test_missing_xdg_file_is_not_an_error(tmp_path: Path) -> None:
    """Discovery only uses files that exist: an empty XDG dir yields no file."""
    (tmp_path / "xdg" / "pigeond").mkdir(parents=True)
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    found = find_config_file(None, env)
    assert found is None or found == Path("/etc/pigeond/pigeond.toml")


# --- file errors ---------------------------------------------------------------


def test_unknown_key_names_the_key(tmp_path: Path) -> None:
    """An unknown top-level key is a ConfigError whose one-line text names the key."""
    cfg = write_toml(tmp_path / "p.toml", "tick_ms = 100\nlisten_port = 4097\n")
    with pytest.raises(ConfigError) as info:
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))
    assert "listen_port" in str(info.value)
    assert "\n" not in str(info.value)


def test_dashed_key_is_unknown(tmp_path: Path) -> None:
    """File keys use '_' (opencode_url); the flag spelling 'opencode-url' is rejected."""
    cfg = write_toml(tmp_path / "p.toml", '"opencode-url" = "http://h:1"\n')
    with pytest.raises(ConfigError, match="opencode-url"):
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))


def test_table_is_an_unknown_key(tmp_path: Path) -> None:
    """A TOML table is not a known key and is rejected."""
    cfg = write_toml(tmp_path / "p.toml", "[server]\nlisten = 'tcp:1'\n")
    with pytest.raises(ConfigError, match="server"):
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))


def test_string_for_int_option_is_an_error(tmp_path: Path) -> None:
    """tick_ms = "500" (a string) in the file is a type error naming the key."""
    cfg = write_toml(tmp_path / "p.toml", 'tick_ms = "500"\n')
    with pytest.raises(ConfigError, match="tick_ms"):
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))


def test_bool_for_int_option_is_an_error(tmp_path: Path) -> None:
    """tick_ms = true is rejected even though bool is an int subclass in Python."""
    cfg = write_toml(tmp_path / "p.toml", "tick_ms = true\n")
    with pytest.raises(ConfigError, match="tick_ms"):
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))


def test_float_for_int_option_is_an_error(tmp_path: Path) -> None:
    """tick_ms = 500.0 is not an integer and is rejected."""
    cfg = write_toml(tmp_path / "p.toml", "tick_ms = 500.0\n")
    with pytest.raises(ConfigError, match="tick_ms"):
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))


def test_int_for_string_option_is_an_error(tmp_path: Path) -> None:
    """listen = 4097 (an integer) is rejected: listen must be a string."""
    cfg = write_toml(tmp_path / "p.toml", "listen = 4097\n")
    with pytest.raises(ConfigError, match="listen"):
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))


def test_int_accepted_for_float_option(tmp_path: Path) -> None:
    """handoff_timeout_s = 5 (an integer) is accepted and stored as a float."""
    cfg = write_toml(tmp_path / "p.toml", "handoff_timeout_s = 5\n")
    config = load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))
    assert config.handoff_timeout_s == 5.0
    assert isinstance(config.handoff_timeout_s, float)


def test_bool_for_float_option_is_an_error(tmp_path: Path) -> None:
    """handoff_timeout_s = true is rejected."""
    cfg = write_toml(tmp_path / "p.toml", "handoff_timeout_s = true\n")
    with pytest.raises(ConfigError, match="handoff_timeout_s"):
        load(base_env(tmp_path, PIGEOND_CONFIG=str(cfg)))


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


@pytest.mark.parametrize("value", ["0", "9", "60001", "-5"])
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
    "url", ["ftp://x", "127.0.0.1:4096", "http://", "http://h:99999", "http://h:1/?q=1"]
)
def test_bad_opencode_url_is_an_error(tmp_path: Path, url: str) -> None:
    """opencode_url must be an http(s) URL with a host, a valid port and no query."""
    with pytest.raises(ConfigError, match="opencode_url"):
        load(base_env(tmp_path), {"opencode_url": url})


def test_https_opencode_url_is_accepted(tmp_path: Path) -> None:
    """An https:// opencode URL is valid."""
    config = load(base_env(tmp_path), {"opencode_url": "https://opencode.internal:8443"})
    assert config.opencode_url == "https://opencode.internal:8443"


@pytest.mark.parametrize("value", ["fast", "1.5", "0x10"])
def test_non_numeric_env_tick_ms_is_an_error(tmp_path: Path, value: str) -> None:
    """PIGEOND_TICK_MS that is not an integer is a ConfigError naming the variable."""
    with pytest.raises(ConfigError, match="PIGEOND_TICK_MS"):
        load(base_env(tmp_path, PIGEOND_TICK_MS=value))


def test_env_int_tolerates_surrounding_whitespace(tmp_path: Path) -> None:
    """PIGEOND_TICK_MS=" 250 " is read as 250."""
    assert load(base_env(tmp_path, PIGEOND_TICK_MS=" 250 ")).tick_ms == 250


def test_non_numeric_flag_float_is_an_error(tmp_path: Path) -> None:
    """--handoff-timeout-s soon is rejected, naming the flag."""
    with pytest.raises(ConfigError, match="--handoff-timeout-s"):
        load(base_env(tmp_path), {"handoff_timeout_s": "soon"})


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_non_finite_float_is_an_error(tmp_path: Path, value: str) -> None:
    """handoff_timeout_s of nan, inf or a negative number is out of range."""
    with pytest.raises(ConfigError, match="handoff_timeout_s"):
        load(base_env(tmp_path), {"handoff_timeout_s": value})


@pytest.mark.parametrize("name", ["listen", "db"])
def test_empty_listen_or_db_is_an_error(tmp_path: Path, name: str) -> None:
    """An empty listen or db (e.g. PIGEOND_LISTEN="") is rejected, not replaced by the default."""
    with pytest.raises(ConfigError, match=name):
        load(base_env(tmp_path, **{f"PIGEOND_{name.upper()}": ""}))


def test_config_error_is_a_value_error() -> None:
    """ConfigError is a ValueError so generic callers can still catch it."""
    assert issubclass(ConfigError, ValueError)


# --- auth ------------------------------------------------------------------------


def test_no_password_means_no_auth(tmp_path: Path) -> None:
    """Without OPENCODE_SERVER_PASSWORD requests to opencode carry no auth."""
    config = load(base_env(tmp_path, OPENCODE_SERVER_USERNAME="alice"))
    assert config.opencode_auth is None


def test_password_gives_basic_auth_with_default_user(tmp_path: Path) -> None:
    """OPENCODE_SERVER_PASSWORD alone yields Basic auth for user 'opencode'."""
    config = load(base_env(tmp_path, OPENCODE_SERVER_PASSWORD="s3cret"))
    assert config.opencode_auth == BasicAuth("opencode", "s3cret")


def test_password_and_username_give_basic_auth(tmp_path: Path) -> None:
    """OPENCODE_SERVER_USERNAME overrides the default user name."""
    env = base_env(tmp_path, OPENCODE_SERVER_PASSWORD="s3cret", OPENCODE_SERVER_USERNAME="alice")
    assert load(env).opencode_auth == BasicAuth("alice", "s3cret")


def test_empty_username_falls_back_to_opencode(tmp_path: Path) -> None:
    """An empty OPENCODE_SERVER_USERNAME falls back to 'opencode'."""
    env = base_env(tmp_path, OPENCODE_SERVER_PASSWORD="s3cret", OPENCODE_SERVER_USERNAME="")
    auth = load(env).opencode_auth
    assert auth is not None
    assert auth.username == "opencode"


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
