"""opencode's server password: from opencode's own variables or ``opencode_password_file``,
never shown."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pigeond.config import ConfigError, load_config
from pigeond.credentials import BasicAuth
from pigeond.service.reload import config_changes

SECRET = "pw-From-A-File-7"


def env_of(home: Path, **extra: str) -> dict[str, str]:
    """An environment isolated from the real user: HOME in tmp, no config file."""
    return {"HOME": str(home), "PIGEOND_CONFIG": "", **extra}


def password_file(tmp_path: Path, text: str = SECRET + "\n", mode: int = 0o600) -> Path:
    path = tmp_path / "opencode-password"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_opencode_password_wins_over_opencode_server_password(tmp_path: Path) -> None:
    """OPENCODE_PASSWORD is taken before OPENCODE_SERVER_PASSWORD, as opencode reads them."""
    env = env_of(tmp_path, OPENCODE_PASSWORD="first", OPENCODE_SERVER_PASSWORD="second")
    assert load_config({}, env).opencode_auth == BasicAuth("opencode", "first")


def test_opencode_password_file_gives_the_password(tmp_path: Path) -> None:
    """With no password in the environment, the file's first line is the password."""
    flags = {"opencode_password_file": str(password_file(tmp_path))}
    assert load_config(flags, env_of(tmp_path)).opencode_auth == BasicAuth("opencode", SECRET)


def test_environment_wins_over_the_password_file(tmp_path: Path) -> None:
    """A password in opencode's variables is taken before the file's."""
    flags = {"opencode_password_file": str(password_file(tmp_path))}
    env = env_of(tmp_path, OPENCODE_SERVER_PASSWORD="from-env")
    assert load_config(flags, env).opencode_auth == BasicAuth("opencode", "from-env")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_password_file_open_to_others_is_refused(tmp_path: Path, mode: int) -> None:
    """A password file group or others may read or write is refused, naming the option."""
    flags = {"opencode_password_file": str(password_file(tmp_path, mode=mode))}
    with pytest.raises(ConfigError, match=r"^opencode_password_file .* chmod 600"):
        load_config(flags, env_of(tmp_path))


def test_missing_or_empty_password_file_is_refused(tmp_path: Path) -> None:
    """A named file that is missing or empty is a configuration error."""
    missing = {"opencode_password_file": str(tmp_path / "nowhere")}
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(missing, env_of(tmp_path))
    empty = {"opencode_password_file": str(password_file(tmp_path, text="\n"))}
    with pytest.raises(ConfigError, match="is empty"):
        load_config(empty, env_of(tmp_path))


def test_the_files_password_is_never_shown(tmp_path: Path) -> None:
    """Neither the settings shown (--check-config), the config's repr nor a reload's
    changed lines hold the password; they name where it came from."""
    path = password_file(tmp_path)
    config = load_config({"opencode_password_file": str(path)}, env_of(tmp_path))
    without = dataclasses.replace(config, opencode_auth=None)
    shown = [config.render(), repr(config)]
    shown += [f"{c.name} {c.old} {c.new}" for c in config_changes(without, config)]
    assert all(SECRET not in text for text in shown)
    assert f"# opencode auth: basic, user 'opencode' (opencode_password_file {path})" in shown[0]
