"""The expiry sweep, a periodic job of its own: it expires, tells the sender, and never
stops its loop on a storage error."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.task import Clock
from twisted.logger import LogLevel

from pigeond.config import Config
from pigeond.delivery.sweeper import ExpirySweeper
from pigeond.model import NOTICE_KIND
from pigeond.storage import StorageUnavailable, SwarmRepository
from pigeond.storage.database import InlineDatabase
from testkit.messages import new_message
from tests.fixed_time import now_ms
from tests.http_helpers import result_of
from tests.storage_helpers import clock_daemon, repo_of

pytestmark = pytest.mark.both_backends


def test_a_message_past_its_time_to_live_expires_and_its_sender_is_told(
    repo: SwarmRepository, clock: Clock
) -> None:
    """One sweep makes the message expired and queues a delivery.failed notice to its sender."""
    repo.accept(new_message("ses_t", msg_id="msg_old"), now_ms(clock), now_ms(clock) + 1000)
    clock.advance(2)
    result_of(ExpirySweeper(InlineDatabase(repo), clock).sweep())
    stored = repo.get("msg_old")
    assert stored is not None and stored.state == "expired"
    notices = [m for m in repo.list_messages(limit=10) if m.kind == NOTICE_KIND]
    assert [(n.to_session, n.reply_to) for n in notices] == [("ses_sender", "msg_old")]


def test_a_storage_error_is_logged_once_and_the_sweep_answers(
    repo: SwarmRepository,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    log_events: list[tuple[LogLevel, str]],
) -> None:
    """A full disk fails every sweep: one error line, and each sweep still fires (a failed
    Deferred would stop its TimerService for good)."""

    def full(self: SwarmRepository, now_ms: int) -> list[str]:
        raise StorageUnavailable("database or disk is full")

    monkeypatch.setattr(SwarmRepository, "expire_due", full)
    sweeper = ExpirySweeper(InlineDatabase(repo), clock)
    for _ in range(3):
        assert result_of(sweeper.sweep()) is None
    errors = [text for level, text in log_events if level == LogLevel.error]
    assert errors == ["expiry sweep: database or disk is full; trying again every tick"]


def test_the_daemon_expires_with_delivery_off(tmp_path: Path, clock: Clock) -> None:
    """Expiry needs no opencode: with delivery off the daemon's sweep job still expires."""
    daemon = clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)
    repo = repo_of(daemon)
    repo.accept(new_message("ses_t", msg_id="msg_old"), now_ms(clock), now_ms(clock) + 1000)
    daemon.start_delivery()
    clock.advance(2)
    stored = repo.get("msg_old")
    assert stored is not None and stored.state == "expired"
