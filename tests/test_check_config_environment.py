"""Whose environment ``pigeond --check-config`` takes its defaults from.

Run by hand on the system service's file (``--config /etc/pigeond/pigeond.toml``,
typically by root), it must show what ``pigeond.service`` would use, not the
caller's ``~/.local/state``; under systemd and for a user's own pigeond, the
process's own environment is the truth.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pigeond.config import (
    SERVICE_ENVIRONMENT,
    SYSTEM_CONFIG_FILE,
    SYSTEM_DB,
    default_db_path,
    default_runtime_socket,
)
from pigeond.credentials import SYSTEM_SOCKET
from pigeond.service.main import check_config_environment

REPO = Path(__file__).resolve().parent.parent
SYSTEM_UNIT = REPO / "systemd" / "pigeond.service"
ROOT_SHELL = {"HOME": "/root", "PATH": "/usr/bin:/bin"}


def service_settings() -> dict[str, list[str]]:
    """The system unit's [Service] settings, every value of a repeated key kept."""
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in SYSTEM_UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


@pytest.mark.parametrize(
    ("flag", "env"),
    [
        (SYSTEM_CONFIG_FILE, ROOT_SHELL),
        (None, {**ROOT_SHELL, "PIGEOND_CONFIG": SYSTEM_CONFIG_FILE}),
        ("/etc/pigeond/../pigeond/./pigeond.toml", ROOT_SHELL),
    ],
    ids=["--config", "PIGEOND_CONFIG", "unnormalised path"],
)
def test_the_system_file_named_outside_systemd_gets_the_service_defaults(
    flag: str | None, env: dict[str, str]
) -> None:
    """Naming /etc/pigeond/pigeond.toml without $STATE_DIRECTORY gives the service's db."""
    used, note = check_config_environment(flag, env)
    assert default_db_path(used) == "/var/lib/pigeond/pigeond.db"
    assert default_runtime_socket(used) == "/run/pigeond/pigeond.sock"
    assert (used["PIGEOND_ALLOW_GROUP"], used["PIGEOND_ALLOW_UIDS"]) == ("pigeond", "0")
    assert note.startswith("# defaults from: pigeond.service")
    assert "STATE_DIRECTORY=/var/lib/pigeond" in note


def test_the_callers_own_settings_still_win_over_the_service_defaults() -> None:
    """A variable the caller did set is kept (and not claimed as the unit's)."""
    env = {**ROOT_SHELL, "PIGEOND_ALLOW_GROUP": "swarm"}
    used, note = check_config_environment(SYSTEM_CONFIG_FILE, env)
    assert used["PIGEOND_ALLOW_GROUP"] == "swarm"
    assert "PIGEOND_ALLOW_GROUP" not in note


def test_under_systemd_the_process_environment_is_used_as_it_is() -> None:
    """With $STATE_DIRECTORY set (ExecReload= runs so) nothing is added, and the note says so."""
    env = {"STATE_DIRECTORY": "/var/lib/pigeond", "PIGEOND_CONFIG": SYSTEM_CONFIG_FILE}
    used, note = check_config_environment(None, env)
    assert used == env
    assert note == "# defaults from: systemd (STATE_DIRECTORY=/var/lib/pigeond)"


@pytest.mark.parametrize(
    ("flag", "env"),
    [
        (None, ROOT_SHELL),
        (None, {**ROOT_SHELL, "PIGEOND_CONFIG": ""}),
        ("/home/alice/.config/pigeond/pigeond.toml", ROOT_SHELL),
    ],
    ids=["discovered file", "no file", "another file"],
)
def test_a_users_pigeond_keeps_its_own_environment(flag: str | None, env: dict[str, str]) -> None:
    """Without the system file named, defaults come from the caller's environment."""
    used, note = check_config_environment(flag, env)
    assert used == env
    assert default_db_path(used) == "/root/.local/state/pigeond/pigeond.db"
    assert "this process's environment" in note


def test_the_service_defaults_are_what_the_system_unit_gives_pigeond() -> None:
    """SERVICE_ENVIRONMENT and SYSTEM_CONFIG_FILE agree with systemd/pigeond.service."""
    service = service_settings()
    unit_env = dict(v.split("=", 1) for v in service["Environment"])
    assert unit_env["PIGEOND_CONFIG"] == SYSTEM_CONFIG_FILE
    [state] = service["StateDirectory"]
    [runtime] = service["RuntimeDirectory"]
    expected = {
        "STATE_DIRECTORY": f"/var/lib/{state}",
        "RUNTIME_DIRECTORY": f"/run/{runtime}",
        **{k: v for k, v in unit_env.items() if re.fullmatch(r"PIGEOND_ALLOW_\w+", k)},
    }
    assert dict(SERVICE_ENVIRONMENT) == expected


def test_the_service_database_and_socket_clients_look_for_are_the_units() -> None:
    """pigeon's SYSTEM_DB and the clients' SYSTEM_SOCKET are where pigeond.service puts them."""
    service = service_settings()
    [state] = service["StateDirectory"]
    [runtime] = service["RuntimeDirectory"]
    assert SYSTEM_DB == default_db_path(SERVICE_ENVIRONMENT) == f"/var/lib/{state}/pigeond.db"
    assert default_runtime_socket(SERVICE_ENVIRONMENT) == SYSTEM_SOCKET
    assert f"/run/{runtime}/pigeond.sock" == SYSTEM_SOCKET
