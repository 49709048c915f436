"""No database password on a command line: a ``--db`` carrying one is refused by pigeond,
pigeon and pigeon-tui in one line; ``db_password_file`` (or libpq's own ~/.pgpass) gives
it instead.  Against the tests' PostgreSQL cluster, with a role that must give its
password (every other role there is trusted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pigeond.cli.pigeon import main as pigeon_main
from pigeond.config import ConfigError, load_config
from pigeond.db_url import has_password
from pigeond_tui import app as tui_app
from testkit.daemon_process import DaemonFactory, isolated_env
from testkit.pg_cluster import ROLE, PgCluster

pytestmark = pytest.mark.slow

PW_ROLE = "pigeond_pw"
SECRET = "Pw-s3cret"
# the test role's: what percent-encoding must carry whole (SECRET is a part of it)
ROLE_PASSWORD = SECRET + " /%&@x"
# every form libpq reads a password in
PASSWORD_FORMS = {
    "userinfo": f"postgresql://u:{SECRET}@127.0.0.1/db",
    "parameter": f"postgresql://u@127.0.0.1/db?sslmode=disable&password={SECRET}",
    "keywords": f"host=127.0.0.1 dbname=db password={SECRET}",
}
FORMS = pytest.mark.parametrize("db", PASSWORD_FORMS.values(), ids=PASSWORD_FORMS.keys())


@pytest.fixture
def pw_url(pg_cluster: PgCluster, pg_migrated_url: str) -> str:
    """A migrated database's URL as the role that must give its password (not in the URL)."""
    pg_cluster.require_password(PW_ROLE, ROLE_PASSWORD)
    return pg_migrated_url.replace(f"{ROLE}@", f"{PW_ROLE}@", 1)


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "db-password"
    path.write_text(ROLE_PASSWORD + "\n")
    path.chmod(0o600)
    return path


def pigeond(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pigeond", *args],
        capture_output=True, text=True, env=isolated_env(home), timeout=60, check=False,
    )  # fmt: skip


def assert_one_line_refusal(err: str, *words: str) -> None:
    assert len(err.splitlines()) == 1 and SECRET not in err, err
    assert all(word in err for word in words), err


# -- refused on a command line -------------------------------------------------------------


def test_every_form_of_a_password_is_recognised() -> None:
    """A URL's user:password@, a password= parameter, a keyword string's password=; not an
    empty password, a URL without one, or a file whose name has the word."""
    assert all(has_password(db) for db in PASSWORD_FORMS.values())
    assert not any(
        has_password(db)
        for db in ("postgresql://u@h/db", "postgresql://u:@h/db", "/var/lib/password=x.db")
    )


@FORMS
def test_pigeond_refuses_a_password_on_db(db: str, tmp_path: Path) -> None:
    """pigeond --db with a password: exit 2, one line pointing at the password file."""
    done = pigeond("--check-config", "--db", db, home=tmp_path / "home")
    assert (done.returncode, done.stdout) == (2, "")
    assert_one_line_refusal(
        done.stderr, "pigeond: --db must not carry a password", "db_password_file"
    )


@FORMS
def test_pigeon_refuses_a_password_on_db(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """pigeon ls --db with a password: exit 2, one line pointing at the password file."""
    assert pigeon_main(["ls", "--db", db], env={"HOME": "/nonexistent"}) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert_one_line_refusal(err, "pigeon: --db must not carry a password", "PGPASSFILE")


@FORMS
def test_pigeon_tui_refuses_a_password_on_db(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """pigeon-tui --db with a password: exit 2 before the screen opens, one line."""
    assert tui_app.main(["--db", db], env={"HOME": "/nonexistent"}) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert_one_line_refusal(err, "pigeon-tui: --db must not carry a password", "service")


def test_a_password_in_the_config_file_is_taken(tmp_path: Path) -> None:
    """The config file is the user's own (like the environment): a URL with a password
    there is accepted, and shown without it."""
    config_file = tmp_path / "pigeond.toml"
    config_file.write_text(f'db = "{PASSWORD_FORMS["userinfo"]}"\n')
    config = load_config({}, {"HOME": str(tmp_path)}, str(config_file))
    assert config.connect_db == PASSWORD_FORMS["userinfo"]
    assert SECRET not in config.render() and "u:***@" in config.render()


# -- the password file ------------------------------------------------------------------------


def test_a_password_file_others_may_read_is_refused(
    tmp_path: Path, password_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mode 0640: pigeond and pigeon refuse it in one line saying how to fix it."""
    password_file.chmod(0o640)
    url = "postgresql://u@127.0.0.1/db"
    done = pigeond(
        "--check-config", "--db", url, "--db-password-file", str(password_file),
        home=tmp_path / "home",
    )  # fmt: skip
    assert done.returncode == 2
    assert_one_line_refusal(done.stderr, "open to group or others", f"chmod 600 {password_file}")
    code = pigeon_main(
        ["ls", "--db", url, "--db-password-file", str(password_file)], env={"HOME": "/x"}
    )
    err = capsys.readouterr().err
    assert code == 2
    assert_one_line_refusal(err, "open to group or others")


def test_a_password_twice_is_a_config_error(tmp_path: Path, password_file: Path) -> None:
    """A URL with a password (from the environment) and a password file: keep one."""
    env = {"HOME": str(tmp_path), "PIGEOND_DB": PASSWORD_FORMS["userinfo"]}
    with pytest.raises(ConfigError, match="keep one"):
        load_config({"db_password_file": str(password_file)}, env, None)


def test_without_its_password_the_role_cannot_connect(
    pw_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: the test role is really asked for its password."""
    assert pigeon_main(["ls", "--db", pw_url], env={"HOME": "/nonexistent"}) == 2
    err = capsys.readouterr().err
    assert "password" in err and len(err.splitlines()) == 1


def test_pigeon_connects_with_a_password_file(
    pw_url: str, password_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--db-password-file, or PIGEOND_DB_PASSWORD_FILE: pigeon reads the database."""
    argv = ["stats", "--json", "--db", pw_url]
    assert pigeon_main([*argv, "--db-password-file", str(password_file)], env={"HOME": "/x"}) == 0
    env = {"HOME": "/x", "PIGEOND_DB_PASSWORD_FILE": str(password_file)}
    assert pigeon_main(argv, env=env) == 0
    out, err = capsys.readouterr()
    assert err == "" and SECRET not in out


def test_pigeon_tui_connects_with_a_password_file(
    pw_url: str, password_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pigeon-tui --db-password-file: the database opens and the screen starts on it."""
    started: list[str] = []
    monkeypatch.setattr(tui_app.PigeonApp, "run", lambda self: started.append(str(self.db)))
    argv = ["--db", pw_url, "--db-password-file", str(password_file)]
    assert tui_app.main(argv, env={"HOME": "/nonexistent"}) == 0
    assert len(started) == 1 and started[0].startswith(pw_url)


def test_libpqs_own_password_file_works(
    pw_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PGPASSFILE (libpq's ~/.pgpass) needs nothing of pigeond: pigeon connects with it."""
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"*:*:*:{PW_ROLE}:{ROLE_PASSWORD}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    assert pigeon_main(["stats", "--db", pw_url], env={"HOME": "/nonexistent"}) == 0


def test_pigeond_connects_with_db_password_file_and_its_command_line_has_none(
    pw_url: str, password_file: Path, tmp_path: Path
) -> None:
    """A started pigeond serves from the database the role opens with the file's password,
    and /proc/<pid>/cmdline holds no copy of it."""
    factory = DaemonFactory(tmp_path)
    try:
        daemon = factory.start(
            pw_url, opencode_url="", extra_args=["--db-password-file", str(password_file)]
        )
        cmdline = Path(f"/proc/{daemon.pid}/cmdline").read_bytes().decode()
        assert pw_url in cmdline and SECRET not in cmdline
        status, body = daemon.request_json(
            "POST", "/swarm/send", {"from": "ses_a", "to": "ses_b", "payload": "hi"}
        )
        assert status == 202, body
        assert SECRET not in daemon.output()
    finally:
        factory.close()
