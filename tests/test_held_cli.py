"""``pigeon threads``, ``held``, ``release`` and ``drop``: a person deciding from a shell, on
the database, every field escaped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pigeond.cli.pigeon import main
from pigeond.model import NOTICE_KIND, Hold, State
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import NOW_MS

A, B = "ses_a", "ses_b"
THREAD = "thr_cli"
HOPS = Hold("hops", f"thread {THREAD} reached 12 hops without a person; a person must release it")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Thread thr_cli: msg_sent went, msg_held and msg_other are held by the hop brake, and
    msg_pair by the pair-rate brake (its payload has an escape sequence)."""
    path = tmp_path / "pigeond.db"
    repo = SwarmRepository(open_database(path))
    held = {"msg_held": HOPS, "msg_other": HOPS, "msg_pair": Hold("pair_rate", "too fast")}
    for msg_id in ("msg_sent", *held):
        message = new_message(B, msg_id=msg_id, sender=A, payload="look \x1b[31mred")
        hold = held.get(msg_id)
        repo.accept_many(
            [Accept(message, NOW_MS, NOW_MS + 60_000, thread_id=THREAD, brake_hold=hold)]
        )
    repo.close()
    return path


def run(capsys: pytest.CaptureFixture[str], db: Path, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--db", str(db)], env={}, now_ms=NOW_MS + 60_000)
    out, err = capsys.readouterr()
    return code, out, err


def reopen(db: Path) -> SwarmRepository:
    return SwarmRepository(open_database(db))


def test_threads_lists_hops_turns_and_held(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """One row per thread: its hops, limit, turns, messages, held, tokens, cost and age."""
    code, out, _ = run(capsys, db, "threads")
    header, row = out.splitlines()
    assert code == 0 and header.split() == [
        "thread", "hops", "limit", "turns", "messages", "held", "tokens", "cost", "updated",
    ]  # fmt: skip
    assert row.split() == [THREAD, "1", "-", "0", "4", "3", "0", "$0.0000", "1m"]


def test_threads_json_is_exact(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """--json: each thread's fields as GET /swarm/threads gives them."""
    code, out, _ = run(capsys, db, "threads", "--json")
    [thread] = json.loads(out)
    assert code == 0 and (thread["thread"], thread["hops"], thread["held"]) == (THREAD, 1, 3)


def test_held_lists_each_with_its_reason_escaped(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """held: msg_id, from, to, thread, brake, reason and payload, the escape escaped."""
    code, out, _ = run(capsys, db, "held")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 4
    assert lines[1].split()[:5] == ["msg_held", A, B, THREAD, "hops"]
    assert "\x1b" not in out and "\\x1b[31mred" in out
    assert "reached 12 hops" in lines[1]


def test_held_json_has_each_msg_id(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """--json: a list of objects with msg_id, brake and reason; --thread filters."""
    code, out, _ = run(capsys, db, "held", "--json")
    held = json.loads(out)
    assert code == 0 and [h["msg_id"] for h in held] == ["msg_held", "msg_other", "msg_pair"]
    assert (held[0]["reason"], held[0]["preview"]) == (HOPS.reason, "look \x1b[31mred")
    assert json.loads(run(capsys, db, "held", "--json", "--thread", "thr_none")[1]) == []


def test_release_resets_by_default(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """release: due now, and the thread's hops start over."""
    code, out, _ = run(capsys, db, "release", "msg_held")
    assert (code, out) == (0, "msg_held: released (reset)\n")
    repo = reopen(db)
    message, thread = repo.get("msg_held"), repo.thread(THREAD)
    assert message is not None and message.next_retry_at == NOW_MS + 60_000
    assert thread is not None and thread.hops == 0


def test_release_raise_raises_the_threads_limit(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """--raise N: the thread's own hop limit is its hops plus N."""
    assert run(capsys, db, "release", "msg_held", "--raise", "5")[0] == 0
    thread = reopen(db).thread(THREAD)
    assert thread is not None and thread.hop_limit == 1 + 5


def test_release_once_changes_nothing_else(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """--once: delivered; the other held message stays held, the hops as they were."""
    assert run(capsys, db, "release", "msg_held", "--once")[0] == 0
    repo = reopen(db)
    assert [h.msg_id for h in repo.held_messages()] == ["msg_other", "msg_pair"]
    thread = repo.thread(THREAD)
    assert thread is not None and (thread.hops, thread.hop_limit) == (1, None)


def test_raising_a_brake_without_a_limit_fails(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """--raise on a pair-rate hold: exit 1 with why, still held."""
    code, _, err = run(capsys, db, "release", "msg_pair", "--raise", "3")
    assert code == 1 and "no limit to raise" in err
    assert "msg_pair" in [h.msg_id for h in reopen(db).held_messages()]


def test_drop_cancels_and_tells_the_sender(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """drop: cancelled, and a failure notice for the sender saying a person dropped it."""
    code, out, _ = run(capsys, db, "drop", "msg_held")
    assert code == 0 and "dropped by a person" in out
    repo = reopen(db)
    message = repo.get("msg_held")
    assert message is not None and message.state == State.CANCELLED
    [notice] = repo.ready_batch(A, NOW_MS + 60_000, 10)
    assert notice.kind == NOTICE_KIND and "dropped by a person" in notice.payload


@pytest.mark.parametrize(
    ("argv", "code", "said"),
    [
        (("release", "msg_sent"), 1, "not held by a brake (state queued)"),
        (("drop", "msg_sent"), 1, "not held by a brake"),
        (("release", "msg_nothing"), 1, "unknown message"),
        (("drop", "not-an-id"), 2, "MSG_ID must match"),
        (("release", "msg_held", "--raise", "0"), 2, "at least 1"),
        (("release", "msg_held", "--once", "--raise", "2"), 2, "not allowed with"),
    ],
)
def test_what_cannot_be_done_is_one_line(
    capsys: pytest.CaptureFixture[str], db: Path, argv: tuple[str, ...], code: int, said: str
) -> None:
    """Not held, unknown, malformed, a bad N, two modes: one line on stderr, its exit code."""
    got, _, err = run(capsys, db, *argv)
    assert got == code and said in err and "Traceback" not in err
