"""The quiet tick: an idle daemon's periodic jobs touch no database, yet a write by
another process, a due expiry and a due owed reply are seen on time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.api.policy import REFRESH_S
from pigeond.config import Config
from pigeond.owed_replies import Owed
from pigeond.service.daemon import Daemon
from pigeond.service.quiet import SAFETY_NET_S, QuietGate
from pigeond.service.wiring import build_daemon
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.database import InlineDatabase
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import now_ms
from tests.http_helpers import result_of
from tests.storage_helpers import CountingDatabase

TICK_S = 0.5
WORKER = "ses_worker"
ASKER = "ses_asker"


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Daemon:
    """A daemon on a Clock (delivery off: no opencode), its jobs running and settled."""
    config = Config(db=str(tmp_path / "p.db"), opencode_url="", reply_within_s=60)
    db = CountingDatabase(SwarmRepository(open_database(tmp_path / "p.db")), writes_too=True)
    built = build_daemon(config, clock, db=db)
    built.jobs.startService()
    settle(clock)
    return built


def settle(clock: Clock) -> None:
    """Ticks enough for every job to have read once since the last write (the policy
    refresh reads every REFRESH_S at most)."""
    for _ in range(int(REFRESH_S / TICK_S) + 1):
        clock.advance(TICK_S)


def calls_of(daemon: Daemon) -> list[str]:
    assert isinstance(daemon.db, CountingDatabase)
    return daemon.db.reads


def other_connection(daemon: Daemon) -> SwarmRepository:
    """Another connection to the daemon's file: another process's writes (``pigeon``)."""
    return SwarmRepository(open_database(Path(daemon.config.db)))


def test_an_idle_tick_makes_no_database_call(daemon: Daemon, clock: Clock) -> None:
    """Nothing queued or owed: the ticks up to the safety net read and write nothing."""
    calls_of(daemon).clear()
    for _ in range(int(SAFETY_NET_S / TICK_S) - 10):
        clock.advance(TICK_S)
    assert calls_of(daemon) == []


def test_the_safety_net_looks_once_however_still_the_file(daemon: Daemon, clock: Clock) -> None:
    """Every SAFETY_NET_S, one look for due work, and the policies read again."""
    calls_of(daemon).clear()
    for _ in range(int(SAFETY_NET_S / TICK_S) + int(REFRESH_S / TICK_S)):
        clock.advance(TICK_S)
    assert calls_of(daemon) == ["timed_work_at", "policies"]


def test_a_write_by_another_process_is_seen_within_one_tick(daemon: Daemon, clock: Clock) -> None:
    """A message another connection queued, already past its time to live, expires at the
    next tick."""
    other = other_connection(daemon)
    other.accept(new_message(WORKER, msg_id="msg_late"), now_ms(clock) - 2000, now_ms(clock) - 1)
    clock.advance(TICK_S)
    stored = other.get("msg_late")
    assert stored is not None and stored.state == "expired"


def test_a_due_expiry_happens_on_time(daemon: Daemon, clock: Clock) -> None:
    """A queued message expires at the first tick after its time to live ends."""
    other = other_connection(daemon)
    other.accept(new_message(WORKER, msg_id="msg_ttl"), now_ms(clock), now_ms(clock) + 3000)
    clock.advance(3)
    clock.advance(TICK_S)
    stored = other.get("msg_ttl")
    assert stored is not None and stored.state == "expired"


def test_a_due_reminder_comes_on_time_after_quiet_ticks(daemon: Daemon, clock: Clock) -> None:
    """An owed reply handed off: the ticks before its deadline read nothing, and the tick
    at its deadline reminds the debtor."""
    other = other_connection(daemon)
    message = new_message(WORKER, msg_id="msg_task", sender=ASKER)
    other.accept_many([Accept(message, now_ms(clock), reply_within_ms=10_000)])
    other.mark_handed_off_many(["msg_task"], now_ms(clock))
    settle(clock)  # 2.5 s of the 10
    calls_of(daemon).clear()
    for _ in range(14):
        clock.advance(TICK_S)
    assert calls_of(daemon) == []
    clock.advance(TICK_S)
    obligation = other.obligation("msg_task")
    assert obligation is not None and obligation.state == Owed.REMINDED


def test_a_message_held_for_consent_leaves_the_ticks_quiet(daemon: Daemon, clock: Clock) -> None:
    """A message waiting for its target's consent is not due by the clock: after one look,
    the ticks read nothing until its expiry, and it expires then."""
    other = other_connection(daemon)
    expires = now_ms(clock) + 20_000
    other.accept_many([Accept(new_message(WORKER, msg_id="msg_held"), now_ms(clock), expires,
                              held="the target's policy asks a person")])  # fmt: skip
    settle(clock)
    calls_of(daemon).clear()
    for _ in range(int((expires - now_ms(clock)) / 1000 / TICK_S) - 1):
        clock.advance(TICK_S)
    assert calls_of(daemon) == []
    clock.advance(TICK_S)
    clock.advance(TICK_S)
    stored = other.get("msg_held")
    assert stored is not None and stored.state == "expired"


def status_of(daemon: Daemon) -> str:
    return result_of(Deferred.fromCoroutine(daemon.status_line()))


def test_the_status_line_reads_the_database_only_after_a_write(
    daemon: Daemon, clock: Clock
) -> None:
    """systemd's status line, asked on every tick, counts again only once a write came."""
    assert status_of(daemon).startswith("queued 0")
    calls_of(daemon).clear()
    for _ in range(10):
        clock.advance(TICK_S)
        status_of(daemon)
    assert calls_of(daemon) == []
    other_connection(daemon).accept(new_message(WORKER), now_ms(clock), now_ms(clock) + 60_000)
    clock.advance(TICK_S)
    assert status_of(daemon).startswith("queued 1")


class LaterDatabase(InlineDatabase):
    """Reads answered when the test says (as the daemon's reader thread answers later)."""

    def __init__(self, repo: SwarmRepository) -> None:
        super().__init__(repo)
        self.waiting: list[tuple[Deferred[Any], Any]] = []

    def read(self, call: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        answer: Deferred[Any] = Deferred()
        self.waiting.append((answer, call(self.repo, *args, **kwargs)))
        return answer

    def answer_all(self) -> None:
        waiting, self.waiting = self.waiting, []
        for answer, result in waiting:
            answer.callback(result)


def test_the_safety_net_s_look_leaves_the_tick_quiet(tmp_path: Path, clock: Clock) -> None:
    """Still file, no open work: while the safety net's one read is under way the tick
    stays quiet (the jobs do not read with it), and quiet after its answer."""
    db = LaterDatabase(SwarmRepository(open_database(tmp_path / "p.db")))
    gate = QuietGate(db, clock, str(tmp_path / "p.db"), lambda: 60_000)
    gate.tick()
    db.answer_all()
    assert gate.quiet
    for _ in range(int(SAFETY_NET_S / TICK_S)):
        clock.advance(TICK_S)
        gate.tick()
    assert len(db.waiting) == 1 and gate.quiet
    db.answer_all()
    assert gate.quiet
