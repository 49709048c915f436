"""``pigeon permissions [--json]`` (from the database) and ``pigeon permission answer``
(through the daemon, here a stand-in)."""

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
from tests.permission_helpers import SENDER, SESSION, permission_request


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), env={"HOME": "/nonexistent"}, now_ms=NOW_MS)
    out, err = capsys.readouterr()
    return code, out, err


def db_with(tmp_path: Path, *requests: Any) -> Path:
    path = tmp_path / "pigeond.db"
    repo = SwarmRepository(open_database(path))
    for request in requests:
        repo.record_permission(request)
    repo.close()
    return path


def test_permissions_says_who_waits_on_what_while_handling_which_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line per request: its id, the session, the command, the message, its sender."""
    db = db_with(tmp_path, permission_request(asked_at=NOW_MS - 120_000))
    code, out, _ = run(capsys, "permissions", "--db", str(db))
    assert code == 0
    assert out == (
        f"per_one  {SESSION} waits for permission: bash `rm -rf build`, while handling"
        f" msg_handled from {SENDER} (2m ago)\n"
    )


def test_permissions_escapes_what_the_model_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command with terminal controls is printed escaped."""
    db = db_with(tmp_path, permission_request(command="echo hi" + EVIL, asked_at=NOW_MS))
    code, out, _ = run(capsys, "permissions", "--db", str(db))
    assert code == 0 and "echo hi" in out and raw_controls(out) == set()


def test_permissions_with_none_open_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing open: one line saying nobody waits."""
    code, out, _ = run(capsys, "permissions", "--db", str(db_with(tmp_path)))
    assert (code, out) == (0, "no session waits for a permission answer\n")


def test_permissions_json_is_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json: the objects GET /swarm/permissions lists."""
    db = db_with(tmp_path, permission_request())
    code, out, _ = run(capsys, "permissions", "--db", str(db), "--json")
    assert code == 0 and json.loads(out) == [permission_request().view()]


def test_show_says_what_the_message_s_target_waits_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pigeon show of the message being handled: a waiting_on line; --json the request."""
    db = db_with(tmp_path, permission_request(msg_id="msg_handled"))
    repo = SwarmRepository(open_database(db))
    repo.accept(new_message(SESSION, msg_id="msg_handled", sender=SENDER), NOW_MS)
    repo.close()
    code, out, _ = run(capsys, "show", "msg_handled", "--db", str(db))
    assert code == 0 and "waiting_on         bash `rm -rf build` (per_one)" in out.splitlines()
    code, out, _ = run(capsys, "show", "msg_handled", "--db", str(db), "--json")
    assert json.loads(out)["waiting_on_permission"]["id"] == "per_one"


class _ReplyHandler(JsonHandler):
    """A daemon's POST /swarm/permissions/ID/reply: what ``answer`` says."""

    seen: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    answer: ClassVar[tuple[int, dict[str, Any]]] = (200, {})

    def do_POST(self) -> None:
        _ReplyHandler.seen.append((self.path, json.loads(self.read_body())))
        self.send_json(*_ReplyHandler.answer)


@pytest.fixture
def daemon_url() -> Iterator[str]:
    _ReplyHandler.seen.clear()
    with serving(_ReplyHandler) as url:
        yield url


def test_permission_answer_posts_the_answer(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """permission answer ID once: that answer, to that request, and a line saying so."""
    _ReplyHandler.answer = (200, {"id": "per_one", "answer": "once", "outcome": "answered"})
    code, out, _ = run(capsys, "permission", "answer", "per_one", "once", "--url", daemon_url)
    assert (code, out) == (0, "per_one: answered once\n")
    assert _ReplyHandler.seen == [("/swarm/permissions/per_one/reply", {"answer": "once"})]


def test_permission_answer_refused_is_exit_1_with_the_daemons_reason(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 409 (answered at the terminal meanwhile) is one escaped line and exit 1."""
    _ReplyHandler.answer = (409, {"error": "opencode no longer has per_one" + EVIL})
    code, out, err = run(capsys, "permission", "answer", "per_one", "reject", "--url", daemon_url)
    assert (code, out) == (1, "")
    assert err.startswith("pigeon: permission answer: daemon answered 409: opencode no longer")
    assert raw_controls(err) == set()


@pytest.mark.parametrize(
    ("request_id", "answer", "error"),
    [("nonsense", "once", "ID must match"), ("per_one", "maybe", "ANSWER must be one of")],
)
def test_permission_answer_checks_its_arguments_first(
    capsys: pytest.CaptureFixture[str], request_id: str, answer: str, error: str
) -> None:
    """A malformed id or answer is a usage error (exit 2) before any request."""
    code, _, err = run(
        capsys, "permission", "answer", request_id, answer, "--url", "http://127.0.0.1:9"
    )
    assert code == 2 and error in err


def test_permission_answer_without_a_daemon_is_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    """An unreachable daemon is exit 3, said in one line."""
    code, _, err = run(
        capsys, "permission", "answer", "per_one", "once", "--url", "http://127.0.0.1:9"
    )
    assert code == 3 and "unreachable" in err and len(err.splitlines()) == 1
