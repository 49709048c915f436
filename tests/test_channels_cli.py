"""``pigeon channels``, ``pigeon channel show|history`` (from the database) and ``pigeon
channel join|leave`` (through the daemon)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pigeond.cli.pigeon import main
from pigeond.cli.pigeon_send import build_parser
from pigeond.storage import SwarmRepository, open_database
from testkit.messages import new_message
from testkit.stdlib_http import JsonHandler, serving
from tests.fixed_time import NOW_MS
from tests.hostile_text import EVIL, EVIL_SHOWN, raw_controls
from tests.storage_helpers import accept_channel_alone

MAX_MEMBERS = 32


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """ops: ses_a and ses_b (the reviewer) since NOW_MS, ses_c a second later; two messages
    sent to it, from ses_a at +5 s (a hostile payload) and from ses_b at +6 s.  dev: ses_a,
    nothing sent."""
    path = tmp_path / "pigeond.db"
    repo = SwarmRepository(open_database(path))
    repo.claim_name("reviewer", "ses_b", NOW_MS)
    for session, at in (("ses_a", NOW_MS), ("ses_b", NOW_MS), ("ses_c", NOW_MS + 1000)):
        repo.join_channel("ops", session, at, MAX_MEMBERS)
    repo.join_channel("dev", "ses_a", NOW_MS, MAX_MEMBERS)
    first = new_message(channel="ops", sender="ses_a", msg_id="msg_c1", payload="go " + EVIL)
    repo.accept(first, NOW_MS + 5000)
    accept_channel_alone(
        repo, new_message(channel="ops", sender="ses_b", msg_id="msg_c2"), NOW_MS + 6000
    )
    repo.close()
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), env={"HOME": "/nonexistent"}, now_ms=NOW_MS)
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str) -> list[list[str]]:
    """A table's lines after the header, split on white space."""
    return [line.split() for line in out.splitlines()[1:]]


# -- from the database -------------------------------------------------------------


def test_channels_lists_each_channel_its_members_and_last_message(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table by channel: how many members, when the last message was sent (- for none)."""
    code, out, _ = run(capsys, "channels", "--db", str(db))
    assert code == 0 and out.splitlines()[0].split() == ["channel", "members", "last_message"]
    assert rows(out) == [["dev", "1", "-"], ["ops", "3", "2026-11-01", "00:00:06.000Z"]]


def test_channels_json_is_exact(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json: the objects GET /swarm/channels lists."""
    code, out, _ = run(capsys, "channels", "--db", str(db), "--json")
    assert code == 0
    assert json.loads(out) == [
        {"channel": "dev", "members": 1, "last_message_at": None},
        {"channel": "ops", "members": 3, "last_message_at": NOW_MS + 6000},
    ]


def test_channel_show_lists_members_in_join_order_with_their_names(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each member, the name it holds now (- for none), and when it joined."""
    code, out, _ = run(capsys, "channel", "show", "ops", "--db", str(db))
    assert code == 0 and out.splitlines()[0].split() == ["session", "name", "joined"]
    assert [row[:2] for row in rows(out)] == [["ses_a", "-"], ["ses_b", "reviewer"], ["ses_c", "-"]]
    assert out.splitlines()[3].endswith("00:00:01.000Z")


def test_channel_show_json_is_exact(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json: the channel and its members as GET /swarm/channels/<channel> lists them."""
    code, out, _ = run(capsys, "channel", "show", "ops", "--db", str(db), "--json")
    shown = json.loads(out)
    assert code == 0 and shown["channel"] == "ops"
    assert shown["members"][1] == {"session": "ses_b", "name": "reviewer", "joined_at": NOW_MS}


def test_channel_show_of_a_channel_nobody_is_in_is_an_empty_table(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A channel exists while it has members: any other shows none, as the route does."""
    code, out, _ = run(capsys, "channel", "show", "nobody", "--db", str(db))
    assert (code, rows(out)) == (0, [])


def test_channel_history_lists_the_channel_messages_oldest_first_escaped(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The channel messages themselves (not the members' copies), payloads escaped; the
    cursor to go on from on stderr."""
    code, out, err = run(capsys, "channel", "history", "ops", "--db", str(db))
    header = ["msg_id", "from", "kind", "priority", "sent", "payload"]
    assert code == 0 and out.splitlines()[0].split() == header
    assert [row[:2] for row in rows(out)] == [["msg_c1", "ses_a"], ["msg_c2", "ses_b"]]
    assert EVIL_SHOWN[:20] in out and raw_controls(out) == set()
    assert err.startswith("next_cursor: cur_") and "more" not in err


def test_channel_history_pages_with_limit_and_since(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--limit 1 shows the oldest and says more wait; --since its cursor shows the next."""
    code, out, err = run(capsys, "channel", "history", "ops", "--db", str(db), "--limit", "1")
    assert code == 0 and [row[0] for row in rows(out)] == ["msg_c1"]
    cursor, _, more = err.removeprefix("next_cursor: ").partition(" ")
    assert more == "(more: run again with --since)\n"
    argv = ("channel", "history", "ops", "--db", str(db), "--since", cursor)
    code, out, _ = run(capsys, *argv)
    assert code == 0 and [row[0] for row in rows(out)] == ["msg_c2"]


def test_channel_history_json_is_exact(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json: the route's page, each message with the inbox's fields, the payload whole."""
    code, out, _ = run(capsys, "channel", "history", "ops", "--db", str(db), "--json")
    page = json.loads(out)
    assert code == 0 and page["has_more"] is False
    assert page["next_cursor"].startswith("cur_")
    first = page["messages"][0]
    assert (first["msg_id"], first["from"], first["to"]) == ("msg_c1", "ses_a", None)
    assert (first["channel"], first["payload"]) == ("ops", "go " + EVIL)
    assert raw_controls(out) == set()


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (("channel", "show", "Ops"), "channel show: CHANNEL must match"),
        (("channel", "history", "ops", "--limit", "0"), "--limit must be between 1 and 1000"),
        (("channel", "history", "ops", "--since", "msg_c1"), "--since must be a cursor cur_N"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    db: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], error: str
) -> None:
    """A malformed channel, limit or cursor is a usage error in one line."""
    code, out, err = run(capsys, *argv, "--db", str(db))
    assert (code, out) == (2, "")
    assert err.startswith(f"pigeon: {error}") and len(err.splitlines()) == 1


# -- through the daemon ------------------------------------------------------------


class _MembersHandler(JsonHandler):
    """A daemon's POST and DELETE /swarm/channels/<channel>/members[/<session>]: the
    answer ``answer`` says."""

    seen: ClassVar[list[tuple[str, str, Any]]] = []  # method, path, body
    answer: ClassVar[tuple[int, dict[str, Any]]] = (200, {})

    def do_POST(self) -> None:
        _MembersHandler.seen.append(("POST", self.path, json.loads(self.read_body())))
        self.send_json(*_MembersHandler.answer)

    def do_DELETE(self) -> None:
        _MembersHandler.seen.append(("DELETE", self.path, None))
        self.send_json(*_MembersHandler.answer)


@pytest.fixture
def daemon_url() -> Iterator[str]:
    _MembersHandler.seen.clear()
    with serving(_MembersHandler) as url:
        yield url


def test_channel_join_posts_the_session_and_prints_the_members(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """join CHANNEL SESSION posts {"session"} to the channel's members and says how many."""
    body = {"channel": "ops", "session": "ses_d", "joined": True, "members": 4}
    _MembersHandler.answer = (201, body)
    code, out, _ = run(capsys, "channel", "join", "ops", "ses_d", "--url", daemon_url)
    assert (code, out) == (0, "ses_d joined ops (4 members)\n")
    assert _MembersHandler.seen == [("POST", "/swarm/channels/ops/members", {"session": "ses_d"})]


def test_channel_join_by_name_says_which_session_joined(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An @name goes to the daemon as it is; the session holding it is printed beside it."""
    _MembersHandler.answer = (201, {"channel": "ops", "session": "ses_b", "joined": True,
                                    "members": 2})  # fmt: skip
    code, out, _ = run(capsys, "channel", "join", "ops", "@reviewer", "--url", daemon_url)
    assert (code, out) == (0, "@reviewer (ses_b) joined ops (2 members)\n")
    assert _MembersHandler.seen[0][2] == {"session": "@reviewer"}


def test_channel_join_of_a_member_is_no_error(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The daemon's 200 with joined: false: already a member, exit 0."""
    _MembersHandler.answer = (200, {"channel": "ops", "session": "ses_a", "joined": False,
                                    "members": 3})  # fmt: skip
    code, out, _ = run(capsys, "channel", "join", "ops", "ses_a", "--url", daemon_url)
    assert (code, out) == (0, "ses_a is a member of ops already (3 members)\n")


@pytest.mark.parametrize(
    ("verb", "status", "error"),
    [("join", 409, "channel ops has 32 members"), ("join", 404, "no session ses_a in opencode"),
     ("leave", 404, "ses_a is not a member of ops")],
)  # fmt: skip
def test_a_refusal_is_exit_1_with_the_daemons_reason_escaped(
    daemon_url: str, capsys: pytest.CaptureFixture[str], verb: str, status: int, error: str
) -> None:
    """Full (409), unknown session or not a member (404): one escaped line, exit 1."""
    _MembersHandler.answer = (status, {"error": error + EVIL})
    code, out, err = run(capsys, "channel", verb, "ops", "ses_a", "--url", daemon_url)
    assert (code, out) == (1, "")
    assert err.startswith(f"pigeon: channel {verb}: daemon answered {status}: {error}")
    assert raw_controls(err) == set() and len(err.splitlines()) == 1


def test_channel_leave_deletes_the_membership(
    daemon_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """leave CHANNEL SESSION sends DELETE /swarm/channels/CHANNEL/members/SESSION."""
    _MembersHandler.answer = (200, {"channel": "ops", "session": "ses_c", "left": True})
    code, out, _ = run(capsys, "channel", "leave", "ops", "ses_c", "--url", daemon_url)
    assert (code, out) == (0, "ses_c left ops\n")
    assert _MembersHandler.seen == [("DELETE", "/swarm/channels/ops/members/ses_c", None)]


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (("join", "Ops", "ses_a"), "channel join: CHANNEL must match"),
        (("join", "ops", "bob"), "channel join: SESSION must match"),
        (("join", "ops", "@Reviewer"), "channel join: SESSION must match"),
        (("leave", "ops", "@reviewer"), "channel leave: SESSION must match"),
        (("join", "ops", "ses_a", "--timeout", "0"), "--timeout must be positive"),
    ],
)
def test_join_and_leave_check_their_arguments_first(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], error: str
) -> None:
    """A malformed channel or session is a usage error (exit 2) before any request."""
    code, _, err = run(capsys, "channel", *argv, "--url", "http://127.0.0.1:9")
    assert code == 2 and err.startswith(f"pigeon: {error}")


def test_join_without_a_daemon_is_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    """An unreachable daemon is exit 3, said in one line."""
    code, _, err = run(capsys, "channel", "join", "ops", "ses_a", "--url", "http://127.0.0.1:9")
    assert code == 3 and "unreachable" in err and len(err.splitlines()) == 1


def test_pigeon_send_channel_help_says_members_get_copies() -> None:
    """pigeon-send --channel no longer says a channel message is only stored."""
    [channel] = [a for a in build_parser()._actions if "--channel" in a.option_strings]
    assert channel.help is not None and "every member but the sender" in channel.help
