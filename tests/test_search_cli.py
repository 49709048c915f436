"""``pigeon search``: the full-text search from the database, escaped like every field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pigeond.cli.pigeon import main
from pigeond.cli.pigeon_search import SEARCH_COLUMNS
from pigeond.storage import SwarmRepository, open_database
from testkit.messages import new_message
from tests.fixed_time import NOW_MS
from tests.hostile_text import EVIL, EVIL_SHOWN, raw_controls


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Three messages saying "review": to ses_a, from ses_a, and between others (hostile)."""
    path = tmp_path / "pigeond.db"
    repo = SwarmRepository(open_database(path))
    repo.accept(new_message("ses_a", msg_id="msg_in", payload="review PR 7"), NOW_MS)
    repo.accept(new_message("ses_b", msg_id="msg_out", sender="ses_a", payload="review"), NOW_MS)
    hostile = new_message("ses_c", msg_id="msg_evil", payload="review " + EVIL)
    repo.accept(hostile, NOW_MS + 1)
    repo.close()
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), env={"HOME": "/nonexistent"}, now_ms=NOW_MS + 60_000)
    out, err = capsys.readouterr()
    return code, out, err


def test_search_lists_every_match_newest_first(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table in SEARCH_COLUMNS, one row per match, newest first."""
    code, out, _ = run(capsys, "search", "review", "--db", str(db))
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == list(SEARCH_COLUMNS)
    assert [line.split()[0] for line in lines[1:]] == ["msg_evil", "msg_out", "msg_in"]


def test_session_narrows_to_what_it_sent_or_received(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--session ses_a: its two messages; --json gives the inbox's fields and the state."""
    _, out, _ = run(capsys, "search", "review", "--db", str(db), "--session", "ses_a", "--json")
    rows = json.loads(out)
    assert [r["msg_id"] for r in rows] == ["msg_out", "msg_in"]
    assert rows[1]["payload"] == "review PR 7" and rows[1]["state"] == "queued"


def test_search_escapes_what_it_prints(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hostile payload shows escaped, no control character reaches the terminal."""
    _, out, _ = run(capsys, "search", "review", "--db", str(db))
    assert EVIL_SHOWN[:20] in out and not raw_controls(out)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["*"], "no word"),
        (["x", "--limit", "0"], "--limit"),
        (["a\udcffb"], "cannot be searched for"),  # an invalid byte of a command line
        (["review", "--session", "ses_\udcff"], "the session has a character"),
    ],
)
def test_bad_text_or_limit_is_a_one_line_usage_error(
    db: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    """Exit 2 and one line on stderr naming the problem."""
    code, out, err = run(capsys, "search", *argv, "--db", str(db))
    assert code == 2 and out == "" and says in err and len(err.splitlines()) == 1
