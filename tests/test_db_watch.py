"""A database file deleted, replaced or moved under a running pigeond is noticed at once,
and the instance lock holds the database file itself, not only ``<db>.lock``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import LogLevel

from pigeond.api.web import HttpError
from pigeond.config import Config
from pigeond.service.daemon import Daemon
from pigeond.service.db_watch import DatabaseWatch
from pigeond.service.systemd import AlreadyRunning, InstanceLock
from pigeond.storage import SwarmRepository, open_database
from testkit.messages import new_message
from tests.http_helpers import daemon_call, result_of, stub_client
from tests.opencode_stub import RecordingOpencode
from tests.storage_helpers import clock_daemon, repo_of

TICK_S = 0.5


@pytest.fixture
def watch(repo: SwarmRepository, db_path: Path, clock: Clock) -> DatabaseWatch:
    """A watch on the open test database, ticking on the fake clock."""
    watch = DatabaseWatch(db_path, clock, interval_s=TICK_S)
    watch.start()
    return watch


def test_the_opened_file_is_no_problem(watch: DatabaseWatch, clock: Clock) -> None:
    """While the file at the path is the one opened, there is nothing to report."""
    clock.advance(TICK_S * 4)
    assert watch.problem is None and watch.check() is None


def test_deleted_file_is_noticed_within_one_tick(
    watch: DatabaseWatch, db_path: Path, clock: Clock
) -> None:
    """Deleting the database file is noticed by the next tick, with the path named."""
    db_path.unlink()
    clock.advance(TICK_S)
    assert watch.problem == f"database file {db_path} was deleted (or moved away) while pigeond ran"


def test_moved_file_is_noticed(watch: DatabaseWatch, db_path: Path, clock: Clock) -> None:
    """Renaming the database away counts as gone: the path no longer names it."""
    db_path.rename(db_path.with_name("elsewhere.db"))
    clock.advance(TICK_S)
    assert watch.problem is not None and "deleted (or moved away)" in watch.problem


def test_replaced_file_is_noticed(watch: DatabaseWatch, db_path: Path, clock: Clock) -> None:
    """Another file put in its place (a restore, a copy) is not the database opened."""
    other = db_path.with_name("copy.db")
    other.write_bytes(db_path.read_bytes())
    os.replace(other, db_path)
    clock.advance(TICK_S)
    assert watch.problem is not None and "was replaced by another file" in watch.problem


def test_file_put_back_is_still_a_problem(watch: DatabaseWatch, db_path: Path) -> None:
    """Once noticed, the problem stays: only a restart opens the file on disk again."""
    moved = db_path.with_name("moved.db")
    db_path.rename(moved)
    watch.check()
    moved.rename(db_path)
    assert watch.check() is not None


def test_problem_is_logged_once_as_critical(
    watch: DatabaseWatch, db_path: Path, clock: Clock, log_events: list[tuple[LogLevel, str]]
) -> None:
    """One critical line names the problem and the remedy, however often it is checked."""
    db_path.unlink()
    clock.advance(TICK_S * 10)
    watch.check()
    critical = [text for level, text in log_events if level == LogLevel.critical]
    assert len(critical) == 1
    assert str(db_path) in critical[0] and "restart pigeond" in critical[0]


def test_a_file_that_cannot_be_looked_at_is_not_gone(db_path: Path, repo: SwarmRepository) -> None:
    """A stat refused (a permission changed) proves nothing: no problem is reported."""
    real = os.stat(db_path)
    answers: list[Any] = [real, PermissionError(13, "Permission denied")]

    def stat(path: str) -> os.stat_result:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    watch = DatabaseWatch(db_path, Clock(), stat=stat)
    assert watch.check() is None


def test_send_check_refuses_with_503_once_gone(
    watch: DatabaseWatch, db_path: Path, clock: Clock
) -> None:
    """The send check lets sends through while the file is there and answers 503 after."""
    watch.refuse_send(None, new_message())  # type: ignore[arg-type]
    db_path.unlink()
    with pytest.raises(HttpError) as refused:
        watch.refuse_send(None, new_message())  # type: ignore[arg-type]
    assert refused.value.status == 503
    assert refused.value.message == (
        f"database file {db_path} was deleted (or moved away) while pigeond ran;"
        " nothing stored; restart pigeond"
    )


# -- the daemon, wired -----------------------------------------------------------------


def daemon_on(tmp_path: Path, clock: Clock, opencode: RecordingOpencode) -> Daemon:
    config = Config(db=str(tmp_path / "p.db"), delivery="call")
    return clock_daemon(config, clock, http=stub_client(opencode))


def test_daemon_with_a_deleted_database_refuses_and_reports(tmp_path: Path, clock: Clock) -> None:
    """After the database is deleted: sends get 503, /health 503 with ok false, the status
    line says why, the watchdog is not fed, and nothing more is handed off."""
    opencode = RecordingOpencode(tmp_path)
    daemon = daemon_on(tmp_path, clock, opencode)
    daemon.start_delivery()
    send = {"from": "ses_a", "to": "ses_t", "payload": "hi"}
    assert daemon_call(daemon, "POST", "/swarm/send", send)[0] == 202
    prompts = len(opencode.seen)
    (tmp_path / "p.db").unlink()
    clock.advance(TICK_S)
    problem = f"database file {tmp_path / 'p.db'} was deleted (or moved away) while pigeond ran"
    assert daemon_call(daemon, "POST", "/swarm/send", send) == (
        503, {"error": f"{problem}; nothing stored; restart pigeond"},
    )  # fmt: skip
    code, health = daemon_call(daemon, "GET", "/health")
    assert (code, health["ok"], health["error"]) == (503, False, f"{problem}; restart pigeond")
    assert result_of(Deferred.fromCoroutine(daemon.status_line())) == f"{problem}; restart pigeond"
    assert not daemon.alive(60)
    repo_of(daemon).accept(new_message("ses_t"), int(clock.seconds() * 1000))
    clock.advance(TICK_S * 10)
    assert len(opencode.seen) == prompts


def test_batch_max_bytes_reaches_the_arbiter(tmp_path: Path, clock: Clock) -> None:
    """Two 3 KB messages share a prompt under the default batch_max_bytes, and go in one
    prompt each once a reload sets it to 4096."""
    opencode = RecordingOpencode(tmp_path)
    daemon = daemon_on(tmp_path, clock, opencode)
    arbiter = daemon.arbiter
    assert arbiter is not None

    def prompts_for_two() -> int:
        before = [path for path, _ in opencode.seen].count("/session/ses_t/prompt_async")
        for _ in range(2):
            repo_of(daemon).accept(
                new_message("ses_t", payload="x" * 3000), int(clock.seconds() * 1000)
            )
        arbiter.tick()
        clock.advance(TICK_S)
        return [path for path, _ in opencode.seen].count("/session/ses_t/prompt_async") - before

    assert prompts_for_two() == 1
    daemon.reload(Config(db=daemon.config.db, delivery="call", batch_max_bytes=4096))
    assert prompts_for_two() == 2


# -- one daemon per database, even without its lock file ---------------------------------


def test_sqlite_works_while_the_database_file_is_locked(db_path: Path) -> None:
    """flock on the database file does not meet SQLite's own locks: two connections still
    write and read it while the instance lock is held."""
    lock = InstanceLock(db_path)
    lock.acquire()
    first = SwarmRepository(open_database(db_path))
    second = SwarmRepository(open_database(db_path))
    message = new_message("ses_t")
    first.accept(message, 1_000)
    assert second.mark_handed_off_many([message.msg_id], 2_000) == [message.msg_id]
    assert first.count_by_state() == {"handed_off": 1}
    first.close()
    second.close()
    lock.release()


def test_second_instance_is_refused_even_after_the_lock_file_is_deleted(db_path: Path) -> None:
    """With ``<db>.lock`` removed under a running pigeond, a second one is still refused,
    because the database file itself is locked; once the first lets go, it may start."""
    first = InstanceLock(db_path)
    first.acquire()
    Path(str(db_path) + ".lock").unlink()
    with pytest.raises(AlreadyRunning, match=f"holds the database file {db_path} itself"):
        InstanceLock(db_path).acquire()
    first.release()
    again = InstanceLock(db_path)
    again.acquire()
    again.release()
