"""``pigeon names`` (from the database) and ``pigeon name set`` (through the daemon)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pigeond.cli.pigeon import main
from pigeond.storage import SwarmRepository, open_database
from testkit.messages import new_message
from testkit.stdlib_http import JsonHandler, serving
from tests.fixed_time import NOW_MS
from tests.hostile_text import EVIL, raw_controls


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """reviewer is ses_b's since NOW_MS, seen at a send 5 s later; lead is ses_a's."""
    path = tmp_path / "pigeond.db"
    repo = SwarmRepository(open_database(path))
    repo.claim_name("reviewer", "ses_b", NOW_MS)
    repo.claim_name("lead", "ses_a", NOW_MS)
    repo.accept(new_message("ses_a", sender="ses_b"), NOW_MS + 5000)
    repo.close()
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), env={"HOME": "/nonexistent"}, now_ms=NOW_MS)
    out, err = capsys.readouterr()
    return code, out, err


def test_names_lists_name_session_since_and_last_seen(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table by name: each name's session, since when, last seen."""
    code, out, _ = run(capsys, "names", "--db", str(db))
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["name", "session", "since", "last_seen"]
    assert [line.split()[:2] for line in lines[1:]] == [["lead", "ses_a"], ["reviewer", "ses_b"]]
    assert lines[2].endswith(":05.000Z") and lines[1].endswith(":00.000Z")


def test_names_json_is_exact(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json: the same objects GET /swarm/names lists."""
    code, out, _ = run(capsys, "names", "--db", str(db), "--json")
    assert code == 0
    assert json.loads(out)[1] == {
        "name": "reviewer", "session": "ses_b", "since": NOW_MS, "last_seen": NOW_MS + 5000
    }  # fmt: skip


class _NamesHandler(JsonHandler):
    """A daemon's POST /swarm/names and DELETE /swarm/names/NAME: 200, or the error
    ``answer`` says."""

    seen: ClassVar[list[dict[str, Any]]] = []
    deleted: ClassVar[list[str]] = []  # the paths DELETEd, query included
    answer: ClassVar[tuple[int, dict[str, Any]]] = (200, {})

    def do_POST(self) -> None:
        _NamesHandler.seen.append(json.loads(self.read_body()))
        self.send_json(*_NamesHandler.answer)

    def do_DELETE(self) -> None:
        _NamesHandler.deleted.append(self.path)
        self.send_json(*_NamesHandler.answer)


@pytest.fixture
def daemon_url() -> Iterator[str]:
    _NamesHandler.seen.clear()
    _NamesHandler.deleted.clear()
    with serving(_NamesHandler) as url:
        yield url


def test_name_set_posts_the_claim(daemon_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """name set NAME SESSION --force posts exactly that and prints who holds it now."""
    body = {"name": "reviewer", "session": "ses_b", "previous": "ses_a", "released": None}
    _NamesHandler.answer = (200, body)
    code, out, _ = run(capsys, "name", "set", "reviewer", "ses_b", "--force", "--url", daemon_url)
    assert code == 0
    assert _NamesHandler.seen == [{"name": "reviewer", "session": "ses_b", "force": True}]
    assert out == "reviewer -> ses_b (taken from ses_a)\n"


def test_name_set_refused_is_exit_1_with_the_daemons_reason(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 409 (a live holder) is one escaped line on stderr and exit 1."""
    _NamesHandler.answer = (409, {"error": "held by ses_a" + EVIL})
    code, out, err = run(capsys, "name", "set", "reviewer", "ses_b", "--url", daemon_url)
    assert (code, out) == (1, "")
    assert err.startswith("pigeon: name set: daemon answered 409: held by ses_a")
    assert raw_controls(err) == set()


@pytest.mark.parametrize(
    ("name", "session", "error"),
    [("Reviewer", "ses_b", "NAME must match"), ("reviewer", "bob", "SESSION must match")],
)
def test_name_set_checks_its_arguments_first(
    capsys: pytest.CaptureFixture[str], name: str, session: str, error: str
) -> None:
    """A malformed name or session is a usage error (exit 2) before any request."""
    code, _, err = run(capsys, "name", "set", name, session, "--url", "http://127.0.0.1:9")
    assert code == 2 and error in err


def test_name_set_without_a_daemon_is_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    """An unreachable daemon is exit 3, said in one line."""
    code, _, err = run(capsys, "name", "set", "reviewer", "ses_b", "--url", "http://127.0.0.1:9")
    assert code == 3 and "unreachable" in err and len(err.splitlines()) == 1


def test_pigeon_send_sends_to_a_name(daemon_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """pigeon-send @reviewer passes the name to the daemon, which resolves it."""
    _NamesHandler.answer = (202, {"accepted": True, "msg_id": "msg_sent"})
    code, out, _ = run(capsys, "send", "--from", "ses_a", "--url", daemon_url, "@reviewer", "hi")
    assert (code, out) == (0, "msg_sent\n")
    assert _NamesHandler.seen[0]["to"] == "@reviewer"


def test_pigeon_send_to_a_name_nobody_holds_is_rejected(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The daemon's 404 for an unheld name is a rejection (exit 1) quoting it."""
    _NamesHandler.answer = (404, {"error": "nobody holds the name @ghost"})
    code, _, err = run(capsys, "send", "--from", "ses_a", "--url", daemon_url, "@ghost", "hi")
    assert code == 1 and "nobody holds the name @ghost" in err


def test_name_release_deletes_the_name_and_says_who_held_it(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """name release NAME --session S sends DELETE /swarm/names/NAME?session=S and prints
    whom the name was taken from."""
    _NamesHandler.answer = (200, {"released": True, "name": "reviewer", "session": "ses_b"})
    argv = ("name", "release", "reviewer", "--session", "ses_b", "--url", daemon_url)
    code, out, _ = run(capsys, *argv)
    assert (code, out) == (0, "reviewer released (was ses_b)\n")
    assert _NamesHandler.deleted == ["/swarm/names/reviewer?session=ses_b"]


def test_name_release_without_a_session_frees_it_from_anyone(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --session the DELETE carries no query: whoever holds the name loses it."""
    _NamesHandler.answer = (200, {"released": True, "name": "reviewer", "session": "ses_a"})
    assert run(capsys, "name", "release", "reviewer", "--url", daemon_url)[0] == 0
    assert _NamesHandler.deleted == ["/swarm/names/reviewer"]


@pytest.mark.parametrize(
    ("status", "error"),
    [(409, "the name reviewer is held by ses_a, not ses_b"), (404, "nobody holds the name")],
)
def test_name_release_refused_is_exit_1_with_the_daemons_reason(
    daemon_url: str, capsys: pytest.CaptureFixture[str], status: int, error: str
) -> None:
    """Held by another session (409) or by nobody (404): one escaped line, exit 1."""
    _NamesHandler.answer = (status, {"error": error + EVIL})
    argv = ("name", "release", "reviewer", "--session", "ses_b", "--url", daemon_url)
    code, out, err = run(capsys, *argv)
    assert (code, out) == (1, "")
    assert err.startswith(f"pigeon: name release: daemon answered {status}: {error}")
    assert raw_controls(err) == set()


@pytest.mark.parametrize(
    ("argv", "error"),
    [(("Reviewer",), "NAME must match"), (("reviewer", "--session", "bob"), "SESSION must match")],
)
def test_name_release_checks_its_arguments_first(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], error: str
) -> None:
    """A malformed name or session is a usage error (exit 2) before any request."""
    code, _, err = run(capsys, "name", "release", *argv, "--url", "http://127.0.0.1:9")
    assert code == 2 and f"name release: {error}" in err
