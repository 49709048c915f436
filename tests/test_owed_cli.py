"""``pigeon owed``: who owes whom a reply, from the database, escaped like every field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pigeond.cli.pigeon import main
from pigeond.cli.presentation import OWED_COLUMNS
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import NOW_MS
from tests.hostile_text import EVIL, raw_controls

LATER = NOW_MS + 90_000


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """ses_w owes ses_a a reply (handed off, reminder due in 30 s); ses_x owes ses_w one
    (not handed off); a met one is not listed."""
    path = tmp_path / "pigeond.db"
    repo = SwarmRepository(open_database(path))
    asks = [
        ("msg_one", "ses_w", "ses_a", "Review PR 7\nplease"),
        ("msg_two", "ses_x", "ses_w", "Which branch? " + EVIL),
        ("msg_met", "ses_w", "ses_a", "done already"),
    ]
    for msg_id, to, sender, payload in asks:
        message = new_message(to, msg_id=msg_id, sender=sender, payload=payload)
        repo.accept_many([Accept(message, NOW_MS, reply_within_ms=120_000)])
    repo.mark_handed_off_many(["msg_one"], NOW_MS)
    reply = new_message("ses_a", msg_id="msg_re", sender="ses_w", reply_to="msg_met")
    repo.accept_many([Accept(reply, NOW_MS + 1)])
    repo.close()
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), env={"HOME": "/nonexistent"}, now_ms=LATER)
    out, err = capsys.readouterr()
    return code, out, err


def test_owed_lists_every_outstanding_obligation(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table of who owes which message to whom and what comes next; met ones left out."""
    code, out, _ = run(capsys, "owed", "--db", str(db))
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split()[:2] == ["debtor", "owes"] and len(lines) == 3
    assert lines[1].split()[:6] == ["ses_w", "msg_one", "ses_a", "chat", "open", "reminder"]
    assert "in 30s" in lines[1] and lines[1].endswith("Review PR 7")
    assert lines[2].split()[:6] == ["ses_x", "msg_two", "ses_w", "chat", "open", "-"]


def test_owed_for_one_session_shows_both_sides(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--session: what it owes and what it is owed."""
    code, out, _ = run(capsys, "owed", "--db", str(db), "--session", "ses_w", "--json")
    rows = json.loads(out)
    assert code == 0
    assert [(r["debtor"], r["msg_id"], r["creditor"]) for r in rows] == [
        ("ses_w", "msg_one", "ses_a"), ("ses_x", "msg_two", "ses_w"),
    ]  # fmt: skip
    assert rows[0]["due_at"] == NOW_MS + 120_000


def test_owed_escapes_what_it_prints(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A payload's escape sequences never reach the terminal raw."""
    _, out, _ = run(capsys, "owed", "--db", str(db))
    assert raw_controls(out) == set()


def test_the_owed_columns_are_the_table_s_header(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One declaration: the header is OWED_COLUMNS."""
    _, out, _ = run(capsys, "owed", "--db", str(db))
    assert out.splitlines()[0].split("  ")[0] == OWED_COLUMNS[0]
    assert all(column in out.splitlines()[0] for column in OWED_COLUMNS)
