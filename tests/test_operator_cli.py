"""The ``pigeon`` operator CLI, run in-process against real WAL databases."""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeond.cli.pigeon import main
from pigeond.cli.presentation import LS_COLUMNS
from pigeond.model import SenderProof, StoredMessage
from pigeond.storage import SCHEMA_VERSION, SwarmRepository, open_database
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from testkit.stdlib_http import JsonHandler, serving
from tests.fixed_time import NOW_MS
from tests.hostile_text import EVIL, EVIL_SHOWN, raw_controls
from tests.sender_proof_support import pending
from tests.storage_helpers import accept_channel_alone

NOW = NOW_MS
LATER = NOW + 90_000
EVIL_TARGET = "ses_t\x1b[2J\u202e"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    """A database with a queued, a failed (sender cron: no notice) and a channel message
    (to a channel nobody is in: fanned out to no one)."""
    path = tmp_path / "pigeond.db"
    repo = SwarmRepository(open_database(path))
    repo.accept(new_message("ses_t", msg_id="msg_q", payload="a <b> & c"), NOW, NOW + 3_600_000)
    repo.accept(new_message("ses_t", msg_id="msg_f", sender="cron"), NOW + 1, NOW + 3_600_000)
    repo.record_failed_attempt("msg_f", "HTTP 400: " + "x" * 80, NOW + 2, None)
    accept_channel_alone(repo, new_message(channel="ops", msg_id="msg_c"), NOW + 3)
    repo.close()
    yield path


@pytest.fixture
def evil_db(tmp_path: Path) -> Iterator[Path]:
    """Rows another tool wrote: escape sequences and a bidi override in every text field.

    A queued message, and a failed one from cron (so no failure notice is queued).
    """
    path = tmp_path / "evil.db"
    repo = SwarmRepository(open_database(path))
    queued = new_message(
        EVIL_TARGET, msg_id="msg_e\x1b[2J", sender="ses_s" + EVIL, kind="chat" + EVIL,
        payload="line one " + EVIL + "\nline two",
    )  # fmt: skip
    repo.accept(queued, NOW, NOW + 3_600_000)
    repo.accept(new_message("ses_t", msg_id="msg_f", sender="cron"), NOW + 1, NOW + 3_600_000)
    repo.record_failed_attempt("msg_f", "HTTP 500: " + "x" * 26 + EVIL, NOW + 2, None)
    repo.close()
    yield path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), env={"HOME": "/nonexistent"}, now_ms=LATER)
    out, err = capsys.readouterr()
    return code, out, err


def state_of(path: Path, msg_id: str) -> str:
    repo = SwarmRepository(open_database(path))
    try:
        message = repo.get(msg_id)
        assert message is not None
        return message.state
    finally:
        repo.close()


def test_ls_prints_a_table_newest_first(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ls: a header and one row per message, newest first, long errors truncated."""
    code, out, _ = run(capsys, "ls", "--db", str(db))
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == list(LS_COLUMNS)
    assert [line.split()[0] for line in lines[1:]] == ["msg_c", "msg_f", "msg_q"]
    assert "#ops" in lines[1] and "1m" in lines[3]
    assert "…" in lines[2] and "x" * 80 not in out


def test_ls_json_with_filters(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ls --json: a list of objects keyed by the table's columns; filters and limit apply."""
    code, out, _ = run(capsys, "ls", "--db", str(db), "--target", "ses_t", "--limit", "1", "--json")
    assert code == 0
    rows = json.loads(out)
    assert rows == [
        {
            "msg_id": "msg_f", "state": "failed", "to": "ses_t", "from": "cron", "kind": "chat",
            "priority": "normal", "attempts": 1, "age": 89, "last_error": "HTTP 400: " + "x" * 80,
        }
    ]  # fmt: skip
    code, out, _ = run(capsys, "ls", "--db", str(db), "--state", "queued", "--from", "ses_sender")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["msg_q"]
    code, out, _ = run(capsys, "ls", "--db", str(db), "--state", "fanned_out", "--target", "ops")
    assert [line.split()[:3] for line in out.splitlines()[1:]] == [["msg_c", "fanned_out", "#ops"]]


def test_show_prints_every_column_and_the_envelope(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """show: every column, times as UTC, and the exact envelope."""
    code, out, _ = run(capsys, "show", "--db", str(db), "msg_q")
    assert code == 0
    assert re.search(r"^created_at +2026-11-01 00:00:00\.000Z$", out, re.M)
    assert "requeue_count" in out and "expires_at" in out
    assert out.rstrip().endswith(
        '<swarm_message v="1" kind="chat" from="ses_sender" to="ses_t" msg_id="msg_q"'
        ' priority="normal" from_verified="unverified">\na &lt;b&gt; &amp; c\n</swarm_message>'
    )


def test_show_json_is_one_object(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """show --json: one object with every column (raw values) plus the receipt, envelope and
    the permission request its target waits on (null: none)."""
    code, out, _ = run(capsys, "show", "--db", str(db), "msg_f", "--json")
    shown = json.loads(out)
    assert code == 0
    assert shown["state"] == "failed" and shown["created_at"] == NOW + 1
    assert shown["envelope"].startswith('<swarm_message v="1" kind="chat" from="cron"')
    assert set(shown) == {f.name for f in dataclasses.fields(StoredMessage)} | {
        "receipt",
        "envelope",
        "waiting_on_permission",
    }
    assert shown["waiting_on_permission"] is None


def test_show_unknown_is_exit_1(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """show of an unknown msg_id: one line on stderr, exit 1."""
    code, out, err = run(capsys, "show", "--db", str(db), "msg_nope")
    assert (code, out) == (1, "")
    assert err == "pigeon: msg_nope: unknown message\n"


def test_requeue_by_id(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """requeue MSG_ID: the failed message is queued again, exit 0."""
    code, out, err = run(capsys, "requeue", "--db", str(db), "msg_f")
    assert (code, out, err) == (0, "msg_f requeued\n", "")
    assert state_of(db, "msg_f") == "queued"


def test_requeue_reports_each_id_that_did_not_change(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """requeue with a wrong-state and an unknown id: one stderr line each, exit 1."""
    code, out, err = run(capsys, "requeue", "--db", str(db), "msg_q", "msg_f", "msg_nope")
    assert (code, out) == (1, "msg_f requeued\n")
    assert err.splitlines() == [
        "pigeon: requeue: msg_q is queued, not failed or expired",
        "pigeon: requeue: msg_nope unknown message",
    ]


def test_retry_now_and_cancel_by_target(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """retry-now and cancel --target change the target's queued messages, exit 0."""
    assert run(capsys, "retry-now", "--db", str(db), "--target", "ses_t")[:2] == (
        0,
        "msg_q due now\n",
    )
    assert run(capsys, "cancel", "--db", str(db), "--target", "ses_t")[:2] == (
        0,
        "msg_q cancelled\n",
    )
    assert state_of(db, "msg_q") == "cancelled"
    code, out, err = run(capsys, "cancel", "--db", str(db), "--target", "ses_t")
    assert (code, out, err) == (0, "", "pigeon: cancel: no queued messages to ses_t\n")


def test_requeue_of_a_delivered_message_is_refused(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """requeue of a handed-off message: one stderr line naming its state, exit 1, unchanged."""
    repo = SwarmRepository(open_database(db))
    repo.accept(new_message("ses_t", msg_id="msg_d"), NOW + 4, NOW + 3_600_000)
    assert repo.mark_handed_off("msg_d", NOW + 5)
    repo.close()
    code, out, err = run(capsys, "requeue", "--db", str(db), "msg_d")
    assert (code, out) == (1, "")
    assert err == "pigeon: requeue: msg_d is handed_off, not failed or expired\n"
    assert state_of(db, "msg_d") == "handed_off"


def test_stats_shows_when_a_held_target_is_next_tried(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A target whose head an outage holds for 30 s: "in 20s" 10 s later, though a message
    sent to it meanwhile is due; --json gives the hold's end as next_retry_at."""
    repo = SwarmRepository(open_database(db))
    assert repo.record_outage(["msg_q"], "connection refused", LATER - 10_000, LATER + 20_000)
    repo.accept(new_message("ses_t", msg_id="msg_q2"), LATER - 5_000, NOW + 3_600_000)
    repo.close()
    code, out, _ = run(capsys, "stats", "--db", str(db))
    assert code == 0 and out.splitlines()[-1].split() == ["ses_t", "2", "1m", "in", "20s"]
    code, out, _ = run(capsys, "stats", "--db", str(db), "--json")
    assert json.loads(out)["queued_per_target"][0]["next_retry_at"] == LATER + 20_000


def test_cancel_by_id_refuses_a_failed_message(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cancel of a failed message: not changed, exit 1."""
    code, _, err = run(capsys, "cancel", "--db", str(db), "msg_f")
    assert code == 1 and "msg_f is failed, not queued" in err
    assert state_of(db, "msg_f") == "failed"


def test_action_needs_ids_or_target(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An action with neither ids nor --target, or both, is a usage error (exit 2)."""
    assert run(capsys, "cancel", "--db", str(db))[0] == 2
    assert run(capsys, "cancel", "--db", str(db), "msg_q", "--target", "ses_t")[0] == 2
    assert state_of(db, "msg_q") == "queued"


def test_show_escapes_every_field(evil_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """show: no raw control or bidi character; fields show their escapes, the payload its lines."""
    code, out, _ = run(capsys, "show", "--db", str(evil_db), "msg_e\x1b[2J")
    assert code == 0
    assert raw_controls(out) == set()
    assert re.search("^from_session +ses_s" + re.escape(EVIL_SHOWN) + "$", out, re.M)
    assert re.search(r"^msg_id +msg_e\\x1b\[2J$", out, re.M)
    assert "\nline one " + EVIL_SHOWN + "\nline two\n" in out
    assert 'kind="chat' + EVIL_SHOWN + '"' in out


def test_show_says_who_really_sent_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """show: the sender's proof, why (escaped) and the call that verified it, in its
    fields and in the envelope's from_verified."""
    path = tmp_path / "proof.db"
    repo = SwarmRepository(open_database(path))
    repo.accept_many([Accept(new_message("ses_t", msg_id="msg_p", sender="ses_a"), NOW,
                             sender=pending(NOW))])  # fmt: skip
    repo.settle_proof("msg_p", SenderProof.VERIFIED, "call c1 found" + EVIL, NOW, "c1")
    repo.close()
    code, out, _ = run(capsys, "show", "--db", str(path), "msg_p")
    assert code == 0 and raw_controls(out) == set()
    assert re.search(r"^from_proof +verified$", out, re.M)
    assert re.search("^from_proof_note +call c1 found" + re.escape(EVIL_SHOWN) + "$", out, re.M)
    assert re.search(r"^from_proof_call +c1$", out, re.M)
    assert ' from_verified="verified">' in out


def test_show_json_keeps_the_exact_characters(
    evil_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """show --json: the fields read back exactly as stored, escape sequences included."""
    code, out, _ = run(capsys, "show", "--db", str(evil_db), "msg_e\x1b[2J", "--json")
    shown = json.loads(out)
    assert code == 0
    assert shown["from_session"] == "ses_s" + EVIL
    assert shown["payload"] == "line one " + EVIL + "\nline two"


def test_show_of_an_unknown_id_escapes_it(
    evil_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The unknown-message error echoes the msg_id escaped."""
    code, _, err = run(capsys, "show", "--db", str(evil_db), "msg_x" + EVIL)
    assert code == 1
    assert err == "pigeon: msg_x" + EVIL_SHOWN + ": unknown message\n"


def test_ls_escapes_every_cell(evil_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ls: no raw control or bidi character; ids, targets, senders and kinds show escapes."""
    code, out, _ = run(capsys, "ls", "--db", str(evil_db))
    assert code == 0
    assert raw_controls(out) == set()
    row = out.splitlines()[2]
    assert row.split()[:5] == [
        "msg_e\\x1b[2J", "queued", "ses_t\\x1b[2J\\u202e", "ses_s" + EVIL_SHOWN,
        "chat" + EVIL_SHOWN,
    ]  # fmt: skip


def test_ls_cuts_last_error_between_escapes(
    evil_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ls: the escaped last_error fits its 40 columns and is never cut inside an escape."""
    code, out, _ = run(capsys, "ls", "--db", str(evil_db), "--state", "failed")
    header, row = out.splitlines()
    shown = row[header.index("last_error") :]
    assert code == 0
    assert shown == "HTTP 500: " + "x" * 26 + "…"  # the next cell would be \\x1b: 40 + 1 wide


def test_ls_json_keeps_the_exact_characters(
    evil_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ls --json: every field exactly as stored."""
    code, out, _ = run(capsys, "ls", "--db", str(evil_db), "--json")
    rows = {row["msg_id"]: row for row in json.loads(out)}
    assert code == 0
    assert rows["msg_e\x1b[2J"]["to"] == EVIL_TARGET
    assert rows["msg_f"]["last_error"] == "HTTP 500: " + "x" * 26 + EVIL


def test_stats_escapes_target_names(evil_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """stats: a target name with an escape sequence and a bidi override shows them escaped."""
    code, out, _ = run(capsys, "stats", "--db", str(evil_db))
    assert code == 0
    assert raw_controls(out) == set()
    assert out.splitlines()[-1].split() == ["ses_t\\x1b[2J\\u202e", "1", "1m", "now"]


def test_stats_json_keeps_the_exact_target(
    evil_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """stats --json: the target name exactly as stored."""
    code, out, _ = run(capsys, "stats", "--db", str(evil_db), "--json")
    assert code == 0
    assert json.loads(out)["queued_per_target"][0]["target"] == EVIL_TARGET


def test_actions_escape_ids_and_targets(evil_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """cancel --target: the changed msg_id on stdout and the target on stderr are escaped."""
    code, out, _ = run(capsys, "cancel", "--db", str(evil_db), "--target", EVIL_TARGET)
    assert (code, out) == (0, "msg_e\\x1b[2J cancelled\n")
    code, _, err = run(capsys, "cancel", "--db", str(evil_db), "--target", EVIL_TARGET)
    assert err == "pigeon: cancel: no queued messages to ses_t\\x1b[2J\\u202e\n"


def test_stats_json(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """stats --json: direct and channel counts apart, queued per target with oldest age."""
    code, out, _ = run(capsys, "stats", "--db", str(db), "--json")
    assert code == 0
    assert json.loads(out) == {
        "direct": {"failed": 1, "queued": 1},
        "channel": {"fanned_out": 1},
        "queued_per_target": [
            {"target": "ses_t", "queued": 1, "oldest_age": 90, "oldest_created_at": NOW,
             "next_retry_at": NOW},
        ],
    }  # fmt: skip


def test_stats_table(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """stats: readable sections with the per-target queue and when each target is next tried."""
    code, out, _ = run(capsys, "stats", "--db", str(db))
    assert code == 0
    assert "deliveries (direct messages and channel members' copies):" in out
    assert "channel messages and members' copies:\n  fanned_out   1\n" in out
    assert out.splitlines()[-2].split() == ["target", "queued", "oldest", "next", "retry"]
    assert out.splitlines()[-1].split() == ["ses_t", "1", "1m", "now"]


def test_db_from_environment(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --db, $PIGEOND_DB names the database."""
    code = main(["ls", "--json"], env={"PIGEOND_DB": str(db)}, now_ms=LATER)
    assert code == 0 and len(json.loads(capsys.readouterr().out)) == 3


def test_missing_database_is_exit_2_and_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing file: one-line error, exit 2, and no file is created."""
    missing = tmp_path / "none.db"
    code, out, err = run(capsys, "ls", "--db", str(missing))
    assert (code, out) == (2, "")
    assert "no such database file" in err and err.count("\n") == 1
    assert not missing.exists()


def test_foreign_database_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An SQLite file without swarm_messages, or not SQLite at all: exit 2, one line."""
    foreign = tmp_path / "other.db"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.close()
    code, _, err = run(capsys, "stats", "--db", str(foreign))
    assert code == 2 and "not a pigeond database (no swarm_messages table)" in err
    junk = tmp_path / "junk.db"
    junk.write_text("hello, not a database " * 100)
    code, _, err = run(capsys, "stats", "--db", str(junk))
    assert code == 2 and err.startswith("pigeon: ") and err.count("\n") == 1


def test_newer_schema_is_exit_2(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A database from a newer pigeond: exit 2, says to upgrade."""
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    code, _, err = run(capsys, "ls", "--db", str(db))
    assert code == 2 and "newer" in err and "upgrade pigeond" in err


def test_older_schema_says_start_pigeond(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A database of an older schema: exit 2, says to start pigeond once to upgrade."""
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    conn.close()
    code, _, err = run(capsys, "ls", "--db", str(db))
    assert code == 2 and "start pigeond once to upgrade" in err


def test_usage_errors_are_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """No subcommand, an unknown one, or a bad option: exit 2."""
    assert (
        run(
            capsys,
        )[0]
        == 2
    )
    assert run(capsys, "frobnicate")[0] == 2
    assert run(capsys, "ls", "--limit", "many")[0] == 2


class _InboxHandler(JsonHandler):
    seen: list[str] = []  # noqa: RUF012 - shared with the test on purpose
    authorization: list[str | None] = []  # noqa: RUF012 - likewise

    def do_GET(self) -> None:
        _InboxHandler.seen.append(self.path)
        _InboxHandler.authorization.append(self.headers.get("authorization"))
        body: dict[str, object]
        if "session=ses_bad" in self.path:
            status, body = 400, {"error": "unknown cursor"}
        elif "session=ses_evil" in self.path:
            status, body = 200, {
                "messages": [
                    {"msg_id": "msg_e" + EVIL, "from": "ses_a" + EVIL, "kind": "chat" + EVIL,
                     "priority": "normal", "payload": EVIL, "handed_off_at": NOW + 5},
                ],
                "has_more": False,
                "next_cursor": "cur" + EVIL,
            }  # fmt: skip
        else:
            status, body = 200, {
                "messages": [
                    {"msg_id": "msg_1", "from": "ses_a", "to": "ses_t", "channel": None,
                     "kind": "chat", "priority": "normal", "reply_to": None, "payload": "hi",
                     "created_at": NOW, "handed_off_at": NOW + 5, "verified_at": None},
                ],
                "has_more": False,
                "next_cursor": "cur_1",
            }  # fmt: skip
        self.send_json(status, body)

    def do_POST(self) -> None:
        _InboxHandler.seen.append(self.path + " " + self.read_body().decode())
        self.send_json(202, {"accepted": True, "msg_id": "msg_sent"})


@pytest.fixture
def daemon_url() -> Iterator[str]:
    _InboxHandler.seen.clear()
    _InboxHandler.authorization.clear()
    with serving(_InboxHandler) as url:
        yield url


def test_inbox_json_passes_the_daemons_answer(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """inbox --json: GET /swarm/inbox with session, since and limit; prints the answer."""
    code = main(
        ["inbox", "--session", "ses_t", "--since", "cur_0", "--limit", "5", "--json"],
        env={"PIGEOND_URL": daemon_url},
    )
    out = capsys.readouterr().out
    assert code == 0
    assert _InboxHandler.seen == ["/swarm/inbox?session=ses_t&since=cur_0&limit=5"]
    assert json.loads(out)["next_cursor"] == "cur_1"


def test_inbox_table_and_errors(daemon_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """inbox: a table and the cursor on stderr; a 4xx is exit 1; no daemon is exit 3."""
    code, out, err = run(capsys, "inbox", "--url", daemon_url, "--session", "ses_t")
    assert code == 0 and out.splitlines()[1].split()[:2] == ["msg_1", "ses_a"]
    assert err == "next_cursor: cur_1\n"
    code, _, err = run(capsys, "inbox", "--url", daemon_url, "--session", "ses_bad")
    assert code == 1 and "unknown cursor" in err
    code, _, err = run(capsys, "inbox", "--url", "http://127.0.0.1:9", "--session", "ses_t")
    assert code == 3 and "unreachable" in err


def test_inbox_table_escapes_every_field(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """inbox: the daemon's fields show escaped in the table and the cursor line."""
    code, out, err = run(capsys, "inbox", "--url", daemon_url, "--session", "ses_evil")
    assert code == 0
    assert raw_controls(out + err) == set()
    assert out.splitlines()[1].split()[:3] == [
        "msg_e" + EVIL_SHOWN, "ses_a" + EVIL_SHOWN, "chat" + EVIL_SHOWN,
    ]  # fmt: skip
    assert err == "next_cursor: cur" + EVIL_SHOWN + "\n"


def test_inbox_json_keeps_the_exact_characters(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """inbox --json: the daemon's answer with every character as it came."""
    code, out, _ = run(capsys, "inbox", "--url", daemon_url, "--session", "ses_evil", "--json")
    assert code == 0
    assert json.loads(out)["messages"][0]["payload"] == EVIL


def test_send_delegates_to_pigeon_send(daemon_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """pigeon send is pigeon-send: it posts the message and prints the msg_id."""
    code = main(["send", "--url", daemon_url, "--from", "ses_me", "ses_t", "hi"], env={})
    assert (code, capsys.readouterr().out) == (0, "msg_sent\n")
    [seen] = _InboxHandler.seen
    path, _, raw = seen.partition(" ")
    body = json.loads(raw)
    assert path == "/swarm/send" and body.pop("msg_id").startswith("msg_")
    assert body == {"from": "ses_me", "payload": "hi", "to": "ses_t"}


def test_inbox_sends_the_token(daemon_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """pigeon inbox finds the token as pigeon-send does and sends it as a bearer token."""
    token = "z" * 43
    code = main(["inbox", "--url", daemon_url, "--session", "ses_t"], env={"PIGEOND_TOKEN": token})
    assert code == 0
    assert _InboxHandler.authorization == [f"Bearer {token}"]


def test_inbox_with_an_unreadable_token_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A PIGEOND_TOKEN_FILE that is not there is a one-line error, exit 2."""
    env = {"PIGEOND_TOKEN_FILE": str(tmp_path / "nope")}
    assert main(["inbox", "--url", "http://127.0.0.1:9", "--session", "ses_t"], env=env) == 2
    assert "nope does not exist" in capsys.readouterr().err


# -- prune -------------------------------------------------------------------------

# 43.2 s: at LATER the failed (NOW + 2) and channel (NOW + 3) messages are older
PRUNE_AGE = ("--older-than-days", "0.0005")


def test_prune_dry_run_shows_what_would_go_and_changes_nothing(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """prune --dry-run: counts by scope and state with oldest and newest; nothing deleted."""
    code, out, err = run(capsys, "prune", "--db", str(db), *PRUNE_AGE, "--dry-run")
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert lines[0] == (
        "done messages last changed before 2026-11-01 00:00:46.800Z (older than 0.0005 days):"
    )
    assert lines[1].split() == ["scope", "state", "count", "oldest", "newest"]
    assert lines[2].split()[:3] == ["direct", "failed", "1"]
    assert lines[3].split()[:3] == ["channel", "fanned_out", "1"]
    assert "2026-11-01 00:00:00.003Z" in lines[3]
    assert lines[4].startswith("would prune 2 messages (dry run: nothing changed)")
    assert state_of(db, "msg_f") == "failed" and state_of(db, "msg_c") == "fanned_out"


def test_prune_deletes_done_messages_and_keeps_queued_ones(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """prune: the failed and the channel message go, the queued direct one stays; exit 0."""
    code, out, _ = run(capsys, "prune", "--db", str(db), *PRUNE_AGE)
    assert code == 0
    assert re.search(r"^pruned 2 messages; database [\d.]+ MiB -> [\d.]+ MiB \(\d+ free", out, re.M)
    repo = SwarmRepository(open_database(db))
    try:
        assert [m.msg_id for m in repo.list_messages()] == ["msg_q"]
    finally:
        repo.close()


def test_prune_json_is_one_object(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """prune --json: what was prunable, what was pruned, and the file's size before and after."""
    code, out, _ = run(capsys, "prune", "--db", str(db), *PRUNE_AGE, "--json")
    shown = json.loads(out)
    assert code == 0
    assert shown["prunable"] == [
        {"scope": "direct", "state": "failed", "count": 1, "oldest_at": NOW + 2,
         "newest_at": NOW + 2},
        {"scope": "channel", "state": "fanned_out", "count": 1, "oldest_at": NOW + 3,
         "newest_at": NOW + 3},
    ]  # fmt: skip
    assert (shown["dry_run"], shown["prunable_total"], shown["pruned"]) == (False, 2, 2)
    assert shown["cutoff"] == LATER - 43_200 and shown["incremental_vacuum"] is True
    assert shown["bytes_after"] <= shown["bytes_before"]


def test_prune_by_default_keeps_thirty_days(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --older-than-days, pigeond's default retention (30 days) applies."""
    code, out, _ = run(capsys, "prune", "--db", str(db))
    assert code == 0
    assert "(older than 30 days)" in out and "  (none)" in out and "pruned 0 messages" in out
    assert state_of(db, "msg_f") == "failed"


@pytest.mark.parametrize("age", ["0", "-1", "nan", "inf", "soon"])
def test_prune_rejects_an_age_that_is_not_positive(
    db: Path, capsys: pytest.CaptureFixture[str], age: str
) -> None:
    """--older-than-days must be a positive number: anything else is exit 2."""
    code, out, _ = run(capsys, "prune", "--db", str(db), "--older-than-days", age)
    assert (code, out) == (2, "")
    assert state_of(db, "msg_f") == "failed"


def test_prune_help_says_what_goes(capsys: pytest.CaptureFixture[str]) -> None:
    """The overview and prune --help describe prune with the same words."""
    assert run(capsys, "--help")[1].count("delete done messages") == 1
    code, out, _ = run(capsys, "prune", "--help")
    assert code == 0 and "delete done messages (verified hand-offs, failed" in " ".join(out.split())


def test_a_readable_service_database_is_used_when_the_user_has_none(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --db, no PIGEOND_DB, no database of the user's: the service's, when readable."""
    code = main(["ls", "--json"], env={"HOME": "/nonexistent"}, now_ms=LATER, system_db=str(db))
    assert code == 0
    assert {m["msg_id"] for m in json.loads(capsys.readouterr().out)} == {"msg_q", "msg_f", "msg_c"}
