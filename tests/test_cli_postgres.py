"""``pigeon`` on a PostgreSQL database (``--db postgresql://…``): the same answers as on
SQLite for the same rows, never a word of the URL's password, and the same one-line
refusals of a database it cannot use.  Against the tests' private PostgreSQL cluster."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pigeond.cli.actions import repository
from pigeond.cli.pigeon import main
from pigeond.db_url import redacted as shown_db
from pigeond.db_url import without_password
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.postgres import open_postgres
from pigeond.storage.postgres.schema import PG_SCHEMA_VERSION
from testkit.messages import new_message
from tests.permission_helpers import permission_request
from tests.ports import closed_port
from tests.storage_helpers import accept_channel_alone
from tests.test_operator_cli import LATER, NOW, PRUNE_AGE, run

SECRET = "s3cret-Pw"
MAX_MEMBERS = 32


def fill(repo: SwarmRepository) -> None:
    """test_operator_cli's rows (queued msg_q and a failed msg_f to ses_t, msg_c to the
    memberless channel ops), a name and a channel with a member; then closed."""
    repo.accept(new_message("ses_t", msg_id="msg_q", payload="alpha <b> & c"), NOW, NOW + 3_600_000)
    repo.accept(new_message("ses_t", msg_id="msg_f", sender="cron"), NOW + 1, NOW + 3_600_000)
    repo.record_failed_attempt("msg_f", "HTTP 400: " + "x" * 80, NOW + 2, None)
    accept_channel_alone(repo, new_message(channel="ops", msg_id="msg_c", payload="beta"), NOW + 3)
    repo.claim_name("reviewer", "ses_t", NOW)
    repo.join_channel("dev", "ses_d", NOW, MAX_MEMBERS)
    repo.record_permission(permission_request(msg_id="msg_q", session="ses_t", asked_at=NOW))
    repo.close()


@pytest.fixture
def sqlite_db(tmp_path: Path) -> str:
    path = tmp_path / "pigeond.db"
    fill(SwarmRepository(open_database(path)))
    return str(path)


@pytest.fixture
def pg_db(pg_migrated_url: str) -> str:
    fill(SwarmRepository(open_postgres(pg_migrated_url)))
    return pg_migrated_url


def run_on(capsys: pytest.CaptureFixture[str], db: str, *argv: str) -> tuple[int, str, str]:
    """``pigeon`` with ``db`` from PIGEOND_DB: a URL with a password is refused on its
    command line, where any local user could read it."""
    code = main(list(argv), env={"HOME": "/nonexistent", "PIGEOND_DB": db}, now_ms=LATER)
    out, err = capsys.readouterr()
    return code, out, err


def with_password(url: str) -> str:
    """The tests' URL with a password in it (the cluster trusts its role: it is not asked for)."""
    return url.replace("pigeond_test@", f"pigeond_test:{SECRET}@", 1)


def set_version(url: str, version: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE swarm_schema SET version = %s", (version,))


def stored_version(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT version FROM swarm_schema").fetchone()
        assert row is not None
        return int(row[0])


READS = [
    ("ls",),
    ("ls", "--json"),
    ("ls", "--state", "failed", "--json"),
    ("ls", "--target", "ops"),
    ("show", "msg_q"),
    ("show", "msg_f", "--json"),
    ("show", "msg_nope"),
    ("stats",),
    ("stats", "--json"),
    ("names", "--json"),
    ("channels", "--json"),
    ("channels",),
    ("search", "alpha"),
    ("search", "beta", "--json"),
    ("owed", "--json"),
    ("permissions",),
    ("permissions", "--json"),
]


@pytest.mark.parametrize("argv", READS, ids=" ".join)
def test_reads_answer_as_on_sqlite(
    sqlite_db: str, pg_db: str, argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each read prints the same lines and exits the same on PostgreSQL as on SQLite."""
    on_sqlite = run(capsys, *argv, "--db", sqlite_db)
    on_postgres = run(capsys, *argv, "--db", pg_db)
    assert on_postgres == on_sqlite
    assert on_sqlite[1] or on_sqlite[2]  # a real answer, not two empty ones


WRITES = [
    ("requeue", "msg_f"),
    ("cancel", "msg_q"),
    ("cancel", "msg_f"),  # refused: failed, not queued
    ("retry-now", "--target", "ses_t"),
    ("requeue", "--target", "ses_t"),
    ("cancel", "--target", "nobody"),
]


@pytest.mark.parametrize("argv", WRITES, ids=" ".join)
def test_actions_change_as_on_sqlite(
    sqlite_db: str, pg_db: str, argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    """requeue, retry-now and cancel print and exit the same, and leave the same rows."""
    on_sqlite = run(capsys, *argv, "--db", sqlite_db)
    on_postgres = run(capsys, *argv, "--db", pg_db)
    assert on_postgres == on_sqlite
    rows_sqlite = run(capsys, "ls", "--json", "--db", sqlite_db)
    assert run(capsys, "ls", "--json", "--db", pg_db) == rows_sqlite
    assert rows_sqlite[0] == 0


def test_requeue_makes_the_failed_message_queued(
    pg_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """requeue on PostgreSQL: msg_f is queued again, attempts 0, due now."""
    assert run(capsys, "requeue", "msg_f", "--db", pg_db) == (0, "msg_f requeued\n", "")
    shown = json.loads(run(capsys, "show", "msg_f", "--json", "--db", pg_db)[1])
    assert (shown["state"], shown["attempts"], shown["next_retry_at"]) == ("queued", 0, LATER)


def test_db_from_the_environment_may_be_a_url(
    pg_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """$PIGEOND_DB may name a PostgreSQL database, as --db may."""
    code = main(["ls", "--json"], env={"PIGEOND_DB": pg_db}, now_ms=LATER)
    assert code == 0 and len(json.loads(capsys.readouterr().out)) == 3


def test_prune_on_postgresql_leaves_the_space_to_autovacuum(
    pg_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """prune deletes the done rows; it gives back no pages and says PostgreSQL reuses the
    space, with no word of SQLite's incremental auto-vacuum."""
    code, out, err = run(capsys, "prune", "--db", pg_db, *PRUNE_AGE, "--dry-run")
    assert (code, err) == (0, "") and "would prune 2 messages" in out
    code, out, err = run(capsys, "prune", "--db", pg_db, *PRUNE_AGE)
    assert (code, err) == (0, "")
    assert re.search(
        r"^pruned 2 messages; database [\d.]+ MiB -> [\d.]+ MiB"
        r" \(PostgreSQL's autovacuum makes the freed space reusable\)$",
        out,
        re.M,
    )
    assert "auto-vacuum mode" not in out and "pages given back" not in out
    assert json.loads(run(capsys, "ls", "--json", "--db", pg_db)[1])[0]["msg_id"] == "msg_q"
    shown = json.loads(run(capsys, "prune", "--db", pg_db, *PRUNE_AGE, "--json")[1])
    assert (shown["pruned"], shown["pages_given_back"], shown["incremental_vacuum"]) == (
        0,
        0,
        False,
    )
    assert shown["bytes_before"] > 0


# -- the password ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["userinfo", "parameter"])
def test_the_password_is_never_printed(
    pg_db: str, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A URL's password (before the host, or as password=) shows in no output or error."""
    url = with_password(pg_db) if where == "userinfo" else f"{pg_db}&password={SECRET}"
    runs = [
        run_on(capsys, url, "ls"),
        run_on(capsys, url, "stats", "--json"),
        run_on(capsys, url, "show", "msg_nope"),
        run_on(capsys, url, "cancel", "msg_f"),
        run_on(capsys, url, "prune", *PRUNE_AGE),
        run_on(capsys, url, "search", "alpha"),
    ]
    assert [code for code, _, _ in runs] == [0, 0, 1, 1, 0, 0]
    for _, out, err in runs:
        assert SECRET not in out and SECRET not in err


def test_an_unreachable_server_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listening: exit 2 (as an unusable file), one line naming the URL without
    its password."""
    port = closed_port()
    code, out, err = run_on(capsys, f"postgresql://u:{SECRET}@127.0.0.1:{port}/db", "ls")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and SECRET not in err
    assert err.startswith(f"pigeon: postgresql://u:***@127.0.0.1:{port}/db: cannot connect to")


@pytest.mark.parametrize("host", ["[broken", "[::1]x"])
def test_a_url_libpq_cannot_parse_is_refused_without_its_password(
    host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """libpq quotes a URL it cannot parse whole in its error (one Python's urlsplit cannot
    read either, or one it can): the password is taken out."""
    code, out, err = run_on(capsys, f"postgresql://u:{SECRET}@{host}/db", "stats")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "not a usable PostgreSQL URL" in err
    assert SECRET not in err and "u:***@" in err


def test_every_written_form_of_the_password_is_taken_out() -> None:
    """As written and percent-decoded, in the user information or a parameter; a file's
    path and text without the password are left as they are."""
    url = "postgresql://u:p%40ss@h/db?sslmode=require&password=other"
    line = f"bad {url}: p@ss p%40ss other"
    assert (
        without_password(line, url)
        == "bad postgresql://u:***@h/db?sslmode=require&password=***: *** *** ***"
    )
    assert shown_db(url) == "postgresql://u:***@h/db?sslmode=require&password=***"
    broken = "postgresql://u:pw@x@[bad/db?password=pw@x"
    assert shown_db(broken) == "postgresql://u:***@[bad/db?password=***"
    assert without_password(f"bad URI: {broken!r}", broken) == f"bad URI: {shown_db(broken)!r}"
    assert without_password("p@ss", "/var/lib/p@ss.db") == "p@ss"
    assert shown_db(Path("/var/lib/pigeond/pigeond.db")) == "/var/lib/pigeond/pigeond.db"


# -- databases pigeon does not use ---------------------------------------------------


def test_a_database_without_pigeonds_tables_is_refused(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty PostgreSQL database: exit 2, one line, and nothing is created in it."""
    code, out, err = run_on(capsys, with_password(pg_url), "ls")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and SECRET not in err
    assert err.endswith(": not a pigeond database (no swarm_schema table)\n")
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('swarm_schema')").fetchone() == (None,)


@pytest.mark.parametrize(
    ("offset", "says"),
    [(1, "is newer than this pigeon understands"), (-1, "start pigeond once to upgrade it")],
)
def test_another_schema_version_is_refused_and_never_migrated(
    pg_db: str, offset: int, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """swarm_schema at another version: exit 2, one line saying what to do; the version
    is left as it was."""
    version = PG_SCHEMA_VERSION + offset
    set_version(pg_db, version)
    code, out, err = run(capsys, "stats", "--db", pg_db)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and says in err and f"schema version {version}" in err
    assert stored_version(pg_db) == version


@pytest.fixture
def cluster_url(pg_url: str) -> Iterator[str]:
    """pg_url, its database made pigeond's."""
    open_postgres(pg_url).close()
    yield pg_url


def test_a_current_database_opens_without_a_migration(
    cluster_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A migrated, empty database: every count is zero, and the version is unchanged."""
    code, out, err = run(capsys, "stats", "--json", "--db", cluster_url)
    assert (code, err) == (0, "")
    assert json.loads(out) == {"direct": {}, "channel": {}, "queued_per_target": []}
    assert stored_version(cluster_url) == PG_SCHEMA_VERSION


def test_routes_lists_which_daemon_delivers_to_which_session(
    pg_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """pigeon routes: each session's daemon, its opencode and when it was last seen there;
    a daemon name written by another tool is shown escaped."""
    repo = SwarmRepository(open_postgres(pg_db))
    try:
        repo.record_routes(["ses_b"], "host-b", "http://10.0.0.2:4096", NOW, 60_000)
        repo.record_routes(["ses_evil"], "\x1b[31mhost", "http://x", NOW, 60_000)
    finally:
        repo.close()
    code, out, _ = run(capsys, "routes", "--db", pg_db)
    assert code == 0
    header, first, second = out.splitlines()
    assert header.split() == ["session", "daemon", "opencode_url", "last_seen"]
    assert first.split()[:3] == ["ses_b", "host-b", "http://10.0.0.2:4096"]
    assert "\x1b" not in second and "\\x1b[31mhost" in second
    code, out, _ = run(capsys, "routes", "--db", pg_db, "--json")
    assert [r["daemon"] for r in json.loads(out)] == ["host-b", "\x1b[31mhost"]


def test_the_tools_borrow_a_connection_instead_of_opening_one_a_read(pg_db: str) -> None:
    """pigeon-tui reads every second: on PostgreSQL each read borrows the same server
    session from the process's pool rather than connecting again."""
    sessions = []
    for _ in range(3):
        with repository(pg_db) as repo:
            sessions.append(repo.connection.execute("SELECT pg_backend_pid()").fetchone()[0])
    assert len(set(sessions)) == 1
