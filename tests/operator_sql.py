"""The operator's SQL of the docs, run on a database pigeond made: the database
(:func:`make_operator_db`, the ``operator_db`` fixture), the sqlite3 on PATH
(:func:`sqlite3_path`, the ``sqlite_path`` fixture: the real CLI, or Python's sqlite3
module standing in), the docs' command run in a shell, and its output read back."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pigeond.storage import SwarmRepository, open_database
from testkit.daemon_process import isolated_env
from testkit.messages import new_message
from tests.docs_commands import (
    SESSION_TIMEOUT_S,
    Command,
    Outcome,
    Verdict,
    commands_with,
    run_in_one_shell,
)
from tests.storage_helpers import accept_channel_alone

DAY_MS = 86_400_000
# the two sqlite3 the SQL runs with (the ``sqlite_path`` fixture's params)
SQLITE3_CLI = "sqlite3 CLI"
SQLITE3_MODULE = "Python sqlite3 module"

# sqlite3 [-header] [-column] DB SQL, done by Python's sqlite3 module: a stand-in for a
# machine without the sqlite3 CLI, and a second SQLite build the queries must suit.
SQLITE3_STAND_IN = """#!{python}
import sqlite3, sys
args = sys.argv[1:]
db, sql = [a for a in args if not a.startswith("-")]
conn = sqlite3.connect(db, isolation_level=None)
cursor = conn.execute(sql)
if "-header" in args and cursor.description:
    print("  ".join(d[0] for d in cursor.description))
for row in cursor.fetchall():
    print("  ".join("" if v is None else str(v) for v in row))
"""


@dataclass(frozen=True)
class OperatorDb:
    home: Path
    path: Path
    hour_ago_ms: int
    failed_id: str = "msg_failed1"
    failed_error: str = "HTTP 404: session ses_b not found"


def sqlite3_path(which: str, tmp_path: Path) -> str:
    """PATH for the SQL commands: the machine's sqlite3 (``which`` is ``SQLITE3_CLI``), or
    the Python stand-in first (``SQLITE3_MODULE``)."""
    path = os.environ.get("PATH", os.defpath)
    if which == SQLITE3_CLI:
        if shutil.which("sqlite3") is None:
            pytest.fail("the sqlite3 CLI is missing: `apt-get install sqlite3` (operators use it)")
        return path
    stand_in = tmp_path / "stand-in" / "sqlite3"
    stand_in.parent.mkdir()
    stand_in.write_text(SQLITE3_STAND_IN.format(python=sys.executable))
    stand_in.chmod(0o755)
    return f"{stand_in.parent}{os.pathsep}{path}"


def make_operator_db(tmp_path: Path) -> OperatorDb:
    """The docs' $DB (~/.local/state/pigeond/pigeond.db, HOME in tmp), made by pigeond's
    storage: two messages queued for ses_a, one failed to ses_b, one channel message."""
    home = tmp_path / "home"
    path = home / ".local" / "state" / "pigeond" / "pigeond.db"
    made = OperatorDb(home, path, int(time.time() * 1000) - 3_600_000)
    t0 = made.hour_ago_ms
    repo = SwarmRepository(open_database(path))
    try:
        for i, to in enumerate(("ses_a", "ses_a", "ses_b")):
            msg_id = made.failed_id if to == "ses_b" else f"msg_queued{i}"
            message = new_message(to, msg_id=msg_id, sender="operator-test")
            repo.accept(message, t0 + i * 60_000, expires_at=t0 + i * 60_000 + DAY_MS)
        accept_channel_alone(
            repo, new_message(channel="ops", msg_id="msg_channel", sender="operator-test"), t0
        )
        assert repo.fail_now([made.failed_id], made.failed_error, t0 + 300_000) == [made.failed_id]
    finally:
        repo.close()
    return made


@contextlib.contextmanager
def opened(path: Path) -> Iterator[SwarmRepository]:
    """The test database, opened as pigeond opens it, closed afterwards."""
    repo = SwarmRepository(open_database(path))
    try:
        yield repo
    finally:
        repo.close()


def run_sql_command(db: OperatorDb, path: str, containing: str) -> Outcome:
    """The docs' ``DB=...`` line and their one sqlite3 command containing ``containing``,
    run in one shell with HOME at the test database's home."""
    sql = [c for c in commands_with(Verdict.SQL) if c.text.startswith("sqlite3 ")]
    [command] = [c for c in sql if containing in c.text]
    [assignment] = [c for c in commands_with(Verdict.SQL) if c.text.startswith("DB=")]
    command = Command(
        command.line, command.text.replace("'msg_...'", f"'{db.failed_id}'"), command.page
    )
    env = {**isolated_env(db.home), "PATH": path}
    outcomes = run_in_one_shell([assignment, command], env, db.home, SESSION_TIMEOUT_S)
    assert [o.returncode for o in outcomes] == [0, 0], "\n".join(o.describe() for o in outcomes)
    return outcomes[1]


def rows(output: str) -> list[str]:
    """The lines of a query's output after its header (and -column's dashes)."""
    lines = [ln for ln in output.splitlines()[1:] if ln.strip()]
    return [ln for ln in lines if set(ln) - set("- ")]


def utc(ms: int) -> str:
    """A unix-ms time as SQLite's datetime(ms/1000, 'unixepoch') writes it."""
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
