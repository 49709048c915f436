"""Owed replies through the daemon: what a send asks, GET /swarm/owed, and the reminder
sweep on the injected clock (storage's steps are in tests/test_obligations.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.task import Clock
from twisted.logger import LogLevel

from pigeond.config import Config
from pigeond.delivery.reminders import ReminderSweep
from pigeond.model import REMINDER_KIND, SESSION_ID_RE
from pigeond.owed_replies import Owed
from pigeond.service.daemon import Daemon
from pigeond.storage import StorageUnavailable, SwarmRepository
from pigeond.storage.database import InlineDatabase
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import now_ms
from tests.http_helpers import daemon_call, result_of
from tests.storage_helpers import clock_daemon, repo_of

pytestmark = pytest.mark.both_backends

ASKER, WORKER = "ses_asker", "ses_worker"


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Daemon:
    """A daemon with delivery off (nothing hands off by itself) and 60 s to reply."""
    config = Config(db=str(tmp_path / "p.db"), opencode_url="", reply_within_s=60)
    return clock_daemon(config, clock)


def send(daemon: Daemon, **fields: object) -> tuple[int, dict[str, object]]:
    body = {"from": ASKER, "to": WORKER, "payload": "Please review PR 7\nthanks"} | fields
    return daemon_call(daemon, "POST", "/swarm/send", body)


def owed_within_ms(daemon: Daemon, msg_id: str) -> int | None:
    obligation = repo_of(daemon).obligation(msg_id)
    return None if obligation is None else obligation.within_ms


def test_a_task_assign_expects_a_reply_by_default(daemon: Daemon) -> None:
    """task.assign owes a reply within the daemon's reply_within_s."""
    status, _ = send(daemon, kind="task.assign", msg_id="msg_task")
    assert status == 202
    assert owed_within_ms(daemon, "msg_task") == 60_000


def test_a_chat_expects_no_reply_by_default(daemon: Daemon) -> None:
    """chat owes nothing unless the send says so."""
    send(daemon, msg_id="msg_chat")
    assert owed_within_ms(daemon, "msg_chat") is None


def test_a_send_can_ask_for_a_reply_within_its_own_time(daemon: Daemon) -> None:
    """expects_reply with reply_within_s: that time, whatever the kind."""
    send(daemon, msg_id="msg_ask", expects_reply=True, reply_within_s=5)
    assert owed_within_ms(daemon, "msg_ask") == 5_000


def test_a_send_can_decline_the_kind_s_default(daemon: Daemon) -> None:
    """expects_reply false on a clarification.request: no obligation."""
    send(daemon, msg_id="msg_q", kind="clarification.request", expects_reply=False)
    assert owed_within_ms(daemon, "msg_q") is None


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"expects_reply": "yes"}, "field 'expects_reply' must be true or false"),
        ({"reply_within_s": 0}, "field 'reply_within_s' must be an integer from 1 to 2592000"),
        ({"reply_within_s": True}, "field 'reply_within_s' must be an integer from 1 to 2592000"),
        (
            {"to": None, "channel": "ops", "expects_reply": True},
            "fields 'expects_reply' and 'reply_within_s' need field 'to'",
        ),
    ],
)
def test_bad_reply_fields_get_a_400_naming_the_field(
    daemon: Daemon, fields: dict[str, object], error: str
) -> None:
    """Each bad value is refused with a clear error, nothing stored."""
    status, body = send(daemon, msg_id="msg_bad", **fields)
    assert (status, body) == (400, {"error": error})
    assert repo_of(daemon).get("msg_bad") is None


def test_owed_lists_what_a_session_owes_and_is_owed(daemon: Daemon) -> None:
    """GET /swarm/owed: the debtor's owes and the creditor's owed, with the first line."""
    send(daemon, kind="task.assign", msg_id="msg_task")
    status, body = daemon_call(daemon, "GET", f"/swarm/owed?session={WORKER}")
    assert status == 200
    [entry] = body["owes"]
    assert (entry["msg_id"], entry["creditor"], entry["state"]) == ("msg_task", ASKER, "open")
    assert entry["first_line"] == "Please review PR 7"
    assert entry["due_at"] is None  # not handed off yet
    assert body["owed"] == []
    _, asker = daemon_call(daemon, "GET", f"/swarm/owed?session={ASKER}")
    assert [o["msg_id"] for o in asker["owed"]] == ["msg_task"] and asker["owes"] == []


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("", "query parameter 'session' is required"),
        ("?session=bob", f"query parameter 'session' must match {SESSION_ID_RE.pattern}"),
    ],
)
def test_owed_needs_a_session(daemon: Daemon, query: str, error: str) -> None:
    """A missing or malformed session is a 400."""
    assert daemon_call(daemon, "GET", f"/swarm/owed{query}") == (400, {"error": error})


def test_owed_needs_the_token(daemon: Daemon) -> None:
    """Like every route but /health, it is refused without the token."""
    status, _ = daemon_call(daemon, "GET", f"/swarm/owed?session={WORKER}", token=False)
    assert status == 401


def test_the_reply_clears_the_obligation_through_the_api(daemon: Daemon) -> None:
    """The debtor's send with reply_to meets it: GET /swarm/owed lists nothing."""
    send(daemon, kind="task.assign", msg_id="msg_task")
    body = {"from": WORKER, "to": ASKER, "payload": "done", "reply_to": "msg_task"}
    assert daemon_call(daemon, "POST", "/swarm/send", body)[0] == 202
    _, listed = daemon_call(daemon, "GET", f"/swarm/owed?session={WORKER}")
    assert listed["owes"] == []
    obligation = repo_of(daemon).obligation("msg_task")
    assert obligation is not None and obligation.state == Owed.MET


def test_the_daemon_reminds_once_then_tells_the_sender(daemon: Daemon, clock: Clock) -> None:
    """The reminders job: 60 s after the hand-off a reminder, 60 s later an overdue notice."""
    send(daemon, kind="task.assign", msg_id="msg_task")
    repo = repo_of(daemon)
    repo.mark_handed_off_many(["msg_task"], now_ms(clock))
    daemon.start_delivery()
    clock.advance(59)
    assert repo.obligation("msg_task").state == Owed.OPEN  # type: ignore[union-attr]
    clock.advance(1)
    assert repo.obligation("msg_task").state == Owed.REMINDED  # type: ignore[union-attr]
    clock.advance(60)
    assert repo.obligation("msg_task").state == Owed.OVERDUE  # type: ignore[union-attr]
    kinds = [(m.kind, m.to_session) for m in repo.list_messages(limit=10) if m.reply_to]
    assert sorted(kinds) == [("reply.overdue", ASKER), (REMINDER_KIND, WORKER)]


def test_the_sweep_kicks_the_session_it_queued_a_reminder_for(
    repo: SwarmRepository, clock: Clock
) -> None:
    """A reminder is handed off at once, not at the next tick: its target is kicked."""
    message = new_message(WORKER, msg_id="msg_t", sender=ASKER)
    repo.accept_many([Accept(message, now_ms(clock), reply_within_ms=1000)])
    repo.mark_handed_off_many(["msg_t"], now_ms(clock))
    kicked: list[str] = []
    clock.advance(1)
    result_of(ReminderSweep(InlineDatabase(repo), clock, kicked.append).sweep())
    assert kicked == [WORKER]


def test_with_nothing_due_the_sweep_takes_no_write(
    repo: SwarmRepository, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Most sweeps find nothing due: a read, and no write transaction."""
    writes: list[int] = []
    monkeypatch.setattr(SwarmRepository, "sweep_obligations", lambda self, now: writes.append(now))
    result_of(ReminderSweep(InlineDatabase(repo), clock).sweep())
    assert writes == []


def test_a_storage_error_is_logged_once_and_the_sweep_answers(
    repo: SwarmRepository,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    log_events: list[tuple[LogLevel, str]],
) -> None:
    """A locked or full database: one error line, and every sweep still answers."""

    def locked(self: SwarmRepository, now_ms: int) -> bool:
        raise StorageUnavailable("database is locked")

    monkeypatch.setattr(SwarmRepository, "obligations_due", locked)
    sweep = ReminderSweep(InlineDatabase(repo), clock)
    for _ in range(3):
        assert result_of(sweep.sweep()) is None
    errors = [text for level, text in log_events if level == LogLevel.error]
    assert errors == ["owed-replies sweep: database is locked; trying again"]
