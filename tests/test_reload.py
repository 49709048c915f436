"""A reload (SIGHUP) says in one log line what it changed; ``--check-config`` prints the
whole configuration, except into the journal (``systemctl reload``'s check)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from pigeond.config import Config
from pigeond.credentials import BasicAuth
from pigeond.service.reload import config_changes, reload_line

RUNNING = Config(db="/var/lib/pigeond/pigeond.db")
PG = "postgresql://pigeond:{}@127.0.0.1:5432/swarm"


def line_for(new: Config, running: Config = RUNNING) -> tuple[bool, str]:
    return reload_line(config_changes(running, new))


def test_a_reload_that_changes_nothing_says_so() -> None:
    """The same settings again: one info line saying nothing changed."""
    assert line_for(replace(RUNNING)) == (False, "reload: nothing changed")


def test_live_changes_are_listed_old_to_new() -> None:
    """Each changed option is named with its old and new value, in the declared order."""
    new = replace(RUNNING, tick_ms=250, log_level="debug")
    assert line_for(new) == (
        False,
        'reload: applied tick_ms: 500 -> 250, log_level: "info" -> "debug"',
    )


def test_changes_waiting_for_a_restart_are_set_apart_and_warned() -> None:
    """An option a running daemon cannot change is named apart, and the line is a warning."""
    new = replace(RUNNING, listen="tcp:4098:interface=127.0.0.1", max_attempts=3)
    assert line_for(new) == (
        True,
        "reload: applied max_attempts: 10 -> 3; needs a restart, running as before until then:"
        ' listen: "tcp:4097:interface=127.0.0.1" -> "tcp:4098:interface=127.0.0.1"',
    )


def test_a_database_password_is_never_shown() -> None:
    """A PostgreSQL URL is shown without its password, also when only the password changed."""
    running = replace(RUNNING, db=PG.format("old-Secret-1"))
    warns, line = line_for(replace(running, db=PG.format("new-Secret-2")), running)
    assert warns
    assert "old-Secret-1" not in line and "new-Secret-2" not in line
    assert line.endswith(
        'db: "postgresql://pigeond:***@127.0.0.1:5432/swarm", its password changed'
    )


def test_opencode_credentials_show_the_user_and_never_the_password() -> None:
    """opencode's Basic auth is named by its user; its password is never printed."""
    running = replace(RUNNING, opencode_auth=BasicAuth("opencode", "pw-Secret-1"))
    new = replace(running, opencode_auth=BasicAuth("robot", "pw-Secret-2"))
    _, line = line_for(new, running)
    assert "pw-Secret" not in line
    assert line.endswith(
        "opencode auth: basic, user 'opencode' (OPENCODE_SERVER_PASSWORD)"
        " -> basic, user 'robot' (OPENCODE_SERVER_PASSWORD)"
    )


def test_allow_group_applies_now_and_names_what_waits() -> None:
    """allow_group is applied at once, and the line warns that the socket file's group waits."""
    warns, line = line_for(replace(RUNNING, allow_group="pigeond"))
    assert warns
    assert line == (
        'reload: applied allow_group: "" -> "pigeond" (who may send changes now, the runtime'
        " socket file's group at restart)"
    )


def check_config(stdout: Path, journal_file: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``pigeond --check-config`` with its output into ``stdout``, ``JOURNAL_STREAM`` naming
    ``journal_file``'s device and inode as systemd sets it, and ``env`` added."""
    st = os.stat(journal_file)
    child = {k: v for k, v in os.environ.items() if not k.startswith(("PIGEOND_", "XDG_"))}
    child |= {"PIGEOND_CONFIG": "", "HOME": str(stdout.parent / "home"),
              "PIGEOND_DB": str(stdout.parent / "p.db"),
              "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"} | env  # fmt: skip
    with stdout.open("w") as out:
        return subprocess.run(
            [sys.executable, "-m", "pigeond", "--check-config"],
            stdout=out, stderr=subprocess.PIPE, text=True, env=child, timeout=30, check=False,
        )  # fmt: skip


def test_check_config_into_the_journal_prints_nothing(tmp_path: Path) -> None:
    """Run with its output in the journal (ExecReload=), a good configuration exits 0 silently."""
    out = tmp_path / "journal"
    out.touch()
    done = check_config(out, out)
    assert (done.returncode, out.read_text(), done.stderr) == (0, "", "")


def test_check_config_elsewhere_prints_the_configuration(tmp_path: Path) -> None:
    """With JOURNAL_STREAM set but its output going to another file, it prints as always."""
    journal = tmp_path / "journal"
    journal.touch()
    out = tmp_path / "terminal"
    done = check_config(out, journal)
    assert done.returncode == 0
    assert "tick_ms = 500" in out.read_text().splitlines()


def test_check_config_into_the_journal_still_names_an_error(tmp_path: Path) -> None:
    """A broken setting under the journal still exits 2 with its one-line reason on stderr."""
    out = tmp_path / "journal"
    out.touch()
    done = check_config(out, out, PIGEOND_TICK_MS="soon")
    assert done.returncode == 2
    assert done.stderr.startswith("pigeond: tick_ms from PIGEOND_TICK_MS must be an integer")
    assert out.read_text() == ""
