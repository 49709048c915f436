"""The pruner: a periodic job on its own clock that prunes done history in small steps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.service.daemon import Daemon, stop_later
from pigeond.service.pruner import IDLE_INTERVAL_S, Pruner, PruneRun
from pigeond.storage import SwarmRepository, connect, open_database
from pigeond.storage.database import InlineDatabase
from pigeond.storage.retention import DAY_MS
from testkit.messages import new_message
from tests.fixed_time import now_ms
from tests.http_helpers import failure_of, result_of
from tests.storage_helpers import add_done_rows, clock_daemon, repo_of


def old_rows(repo: SwarmRepository, clock: Clock, count: int, payload_bytes: int = 16) -> None:
    """``count`` verified hand-offs done 40 days before the clock's now."""
    add_done_rows(repo.sqlite_connection, count, payload_bytes, now_ms(clock) - 40 * DAY_MS)


def remaining(repo: SwarmRepository) -> int:
    return len(repo.list_messages(limit=1_000_000))


def run_now(job: Pruner, clock: Clock) -> PruneRun:
    """One whole run, the reactor's turns between its steps included."""
    run = Deferred.fromCoroutine(job.run())
    clock.advance(0)
    return result_of(run)


def pruner(
    repo: SwarmRepository,
    clock: Clock,
    *,
    retention_days: float = 30,
    interval_s: float = 60,
    batch_rows: int = 2,
    max_batches: int = 2,
    vacuum_pages: int = 512,
    max_vacuum_steps: int = 4,
    idle: Callable[[], bool] = lambda: False,
) -> Pruner:
    return Pruner(
        InlineDatabase(repo), clock, retention_days=retention_days, interval_s=interval_s,
        batch_rows=batch_rows, max_batches=max_batches, vacuum_pages=vacuum_pages,
        max_vacuum_steps=max_vacuum_steps, idle=idle,
    )  # fmt: skip


def test_first_run_comes_one_interval_after_start(repo: SwarmRepository, clock: Clock) -> None:
    """Starting prunes nothing at once; the first run comes after interval_s."""
    old_rows(repo, clock, 3)
    job = pruner(repo, clock, interval_s=60, batch_rows=500)
    job.start()
    clock.advance(59)
    assert remaining(repo) == 3
    clock.advance(1)
    assert remaining(repo) == 0


def test_an_idle_daemon_prunes_once_an_hour(repo: SwarmRepository, clock: Clock) -> None:
    """While nothing is written, a run comes every IDLE_INTERVAL_S, not every interval_s:
    rows that age past the cutoff meanwhile go at the next of those."""
    job = pruner(repo, clock, interval_s=60, batch_rows=500, idle=lambda: True)
    job.start()
    clock.advance(60)  # the first run: nothing to prune yet
    old_rows(repo, clock, 3)
    clock.advance(IDLE_INTERVAL_S - 60)
    assert remaining(repo) == 3
    clock.advance(60)
    assert remaining(repo) == 0


def test_a_run_prunes_at_most_max_batches_batches(repo: SwarmRepository, clock: Clock) -> None:
    """Each run removes at most max_batches times batch_rows rows; the next run goes on."""
    old_rows(repo, clock, 10)
    job = pruner(repo, clock, interval_s=60, batch_rows=2, max_batches=2)
    job.start()
    clock.advance(60)
    assert remaining(repo) == 6
    clock.advance(60)
    assert remaining(repo) == 2


def test_the_reactor_runs_between_batches(repo: SwarmRepository, clock: Clock) -> None:
    """Only the first batch runs at once; each next one waits for the reactor's next turn."""
    old_rows(repo, clock, 10)
    run = Deferred.fromCoroutine(pruner(repo, clock, batch_rows=2, max_batches=3).run())
    assert remaining(repo) == 8 and not run.called
    clock.advance(0)
    assert remaining(repo) == 4
    done = result_of(run)
    assert done.total == 6 and dict(done.pruned) == {("direct", "handed_off"): 6}


def test_young_and_undone_rows_are_left_alone(repo: SwarmRepository, clock: Clock) -> None:
    """A run leaves queued, unverified and young rows."""
    old = now_ms(clock) - 40 * DAY_MS
    repo.accept(new_message("ses_t", msg_id="msg_queued"), old, now_ms(clock) + DAY_MS)
    repo.accept(new_message("ses_t", msg_id="msg_unverified"), old, now_ms(clock) + DAY_MS)
    repo.mark_handed_off("msg_unverified", old, verify_by=old + 60_000)
    add_done_rows(repo.sqlite_connection, 3, 16, now_ms(clock) - DAY_MS)
    done = run_now(pruner(repo, clock, batch_rows=500), clock)
    assert done.total == 0 and remaining(repo) == 5


def test_zero_retention_keeps_everything(repo: SwarmRepository, clock: Clock) -> None:
    """retention_days = 0 turns pruning off."""
    old_rows(repo, clock, 3)
    job = pruner(repo, clock, retention_days=0)
    job.start()
    clock.advance(600)
    assert remaining(repo) == 3


def test_configure_applies_from_the_next_run(repo: SwarmRepository, clock: Clock) -> None:
    """A new retention_days is used at the next run: 50 days keeps 40-day-old rows."""
    old_rows(repo, clock, 3)
    job = pruner(repo, clock, interval_s=60, batch_rows=500)
    job.configure(Config(retention_days=50))
    job.start()
    clock.advance(60)
    assert remaining(repo) == 3
    job.configure(Config(retention_days=30))
    clock.advance(60)
    assert remaining(repo) == 0


def test_freed_pages_are_given_back(repo: SwarmRepository, clock: Clock) -> None:
    """After pruning, a run returns free pages to the file system, a bounded number."""
    old_rows(repo, clock, 400, payload_bytes=1024)
    before = repo.file_size()
    job = pruner(repo, clock, batch_rows=500, vacuum_pages=20, max_vacuum_steps=3)
    done = run_now(job, clock)
    assert done.total == 400 and done.pages_given_back == 60
    assert repo.file_size().page_count == before.page_count - 60


def test_a_locked_database_skips_a_run_and_the_loop_goes_on(
    db_path: Path, clock: Clock, logged: list[str]
) -> None:
    """A run that cannot get the write lock is logged and skipped; the next one prunes."""
    open_database(db_path).close()
    repo = SwarmRepository(connect(db_path, busy_timeout_ms=50))
    old_rows(repo, clock, 3)
    holder = connect(db_path)
    holder.execute("BEGIN IMMEDIATE")
    job = pruner(repo, clock, interval_s=60, batch_rows=500)
    job.start()
    clock.advance(60)
    holder.execute("ROLLBACK")
    holder.close()
    assert any("pruning skipped" in line for line in logged) and remaining(repo) == 3
    assert job.running
    clock.advance(60)
    assert remaining(repo) == 0
    repo.close()


def test_a_run_is_logged_with_what_went(
    repo: SwarmRepository, clock: Clock, logged: list[str]
) -> None:
    """A run that pruned says how many messages of which state, and the pages given back."""
    old_rows(repo, clock, 3)
    pruner(repo, clock, interval_s=60, batch_rows=500).start()
    clock.advance(60)
    assert any(
        "pruned 3 done messages older than 30 days (direct handed_off 3)" in line for line in logged
    ), logged


def test_stop_ends_a_run_between_batches(repo: SwarmRepository, clock: Clock) -> None:
    """Stopped mid-run, the pruner takes no further step (the database may close next)."""
    old_rows(repo, clock, 10)
    job = pruner(repo, clock, batch_rows=2, max_batches=5)
    run: Deferred[PruneRun] = Deferred.fromCoroutine(job.run())
    job.stop()
    clock.advance(0)
    assert remaining(repo) == 8
    assert failure_of(run).check(CancelledError)


# -- in the daemon ------------------------------------------------------------------


def daemon_with_old_rows(tmp_path: Path, clock: Clock) -> Daemon:
    """A daemon with delivery off (no arbiter) and 3 rows done 40 days ago."""
    daemon = clock_daemon(
        Config(db=str(tmp_path / "p.db"), opencode_url="", retention_days=30), clock
    )
    old_rows(repo_of(daemon), clock, 3)
    return daemon


def test_the_daemon_prunes_with_delivery_off(tmp_path: Path, clock: Clock) -> None:
    """A daemon without an arbiter still prunes, a minute after it starts."""
    daemon = daemon_with_old_rows(tmp_path, clock)
    daemon.start_delivery()
    assert daemon.arbiter is None
    clock.advance(60)
    assert remaining(repo_of(daemon)) == 0


def test_reload_applies_retention_days_live(tmp_path: Path, clock: Clock) -> None:
    """A reload's retention_days applies from the next run, without a restart."""
    daemon = daemon_with_old_rows(tmp_path, clock)
    daemon.start_delivery()
    assert daemon.reload(replace(daemon.config, retention_days=0)) == []
    clock.advance(60)
    assert remaining(repo_of(daemon)) == 3
    daemon.reload(replace(daemon.config, retention_days=30))
    clock.advance(60)
    assert remaining(repo_of(daemon)) == 0


def test_stop_stops_the_pruner(tmp_path: Path, clock: Clock, logged: list[str]) -> None:
    """After the daemon stops, no run comes to touch the closed database."""
    daemon = daemon_with_old_rows(tmp_path, clock)
    daemon.start_delivery()
    result_of(stop_later(daemon))
    clock.advance(600)
    assert not daemon.pruner.running
    assert not any("pruning" in line and "failed" in line for line in logged), logged
