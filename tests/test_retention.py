"""Retention in storage: which rows a prune removes, in what order, and the file shrinking."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from twisted.logger import Logger

from pigeond.storage import SwarmRepository, connect, open_database
from pigeond.storage.migrations import MIGRATIONS
from pigeond.storage.retention import DAY_MS, cutoff_ms
from pigeond.storage.schema import (
    AUTO_VACUUM_INCREMENTAL,
    migrate,
    use_incremental_vacuum,
)
from pigeond.storage.synthetic import drop_statistics
from testkit.messages import new_message
from tests.fixed_time import NOW_MS
from tests.storage_helpers import accept_channel_alone, add_done_rows

pytestmark = pytest.mark.both_backends
OLD = NOW_MS - 40 * DAY_MS
CUTOFF = cutoff_ms(NOW_MS, 30)


def ids(repo: SwarmRepository) -> set[str]:
    return {m.msg_id for m in repo.list_messages(limit=1_000_000)}


def delivered(repo: SwarmRepository, msg_id: str, at: int, *, verified: bool = True) -> None:
    """Accepted and handed off at ``at``; verified at ``at`` unless told otherwise."""
    repo.accept(new_message("ses_t", msg_id=msg_id), at, at + DAY_MS)
    assert repo.mark_handed_off(msg_id, at, verify_by=at + 60_000)
    if verified:
        assert repo.mark_verified([msg_id], at) == [msg_id]


def ended(repo: SwarmRepository, msg_id: str, state: str, at: int) -> None:
    """A direct message from a non-session sender (no notice) that ended in ``state`` at ``at``."""
    repo.accept(new_message("ses_t", msg_id=msg_id, sender="cron"), at, at + DAY_MS)
    if state == "failed":
        assert repo.fail_now([msg_id], "HTTP 400", at) == [msg_id]
    elif state == "expired":
        assert repo.expire_due(at + DAY_MS) == [msg_id]
    else:
        assert repo.cancel(msg_id, at).value == "changed"


def every_kind_of_row(repo: SwarmRepository) -> None:
    """Old and young rows of every state, direct and channel."""
    repo.accept(new_message("ses_t", msg_id="msg_queued_old"), OLD, NOW_MS + DAY_MS)
    delivered(repo, "msg_unverified_old", OLD, verified=False)
    delivered(repo, "msg_verified_old", OLD)
    ended(repo, "msg_failed_old", "failed", OLD)
    ended(repo, "msg_expired_old", "expired", OLD - DAY_MS)
    ended(repo, "msg_cancelled_old", "cancelled", OLD)
    accept_channel_alone(repo, new_message(channel="ops", msg_id="msg_channel_old"), OLD)
    delivered(repo, "msg_verified_young", NOW_MS - DAY_MS)
    ended(repo, "msg_failed_young", "failed", NOW_MS - DAY_MS)
    accept_channel_alone(
        repo, new_message(channel="ops", msg_id="msg_channel_young"), NOW_MS - DAY_MS
    )


def prune_all(repo: SwarmRepository, cutoff: int, batch: int = 500) -> int:
    pruned = 0
    while n := sum(repo.prune_batch(cutoff, batch).values()):
        pruned += n
    return pruned


# -- which rows go --------------------------------------------------------------


def test_prune_removes_done_rows_older_than_the_cutoff_only(repo: SwarmRepository) -> None:
    """Old verified, failed, expired, cancelled and channel rows go; all others stay."""
    every_kind_of_row(repo)
    pruned = repo.prune_batch(CUTOFF, 100)
    assert dict(pruned) == {
        ("direct", "handed_off"): 1, ("direct", "failed"): 1, ("direct", "expired"): 1,
        ("direct", "cancelled"): 1, ("channel", "fanned_out"): 1,
    }  # fmt: skip
    assert ids(repo) == {
        "msg_queued_old", "msg_unverified_old", "msg_verified_young", "msg_failed_young",
        "msg_channel_young",
    }  # fmt: skip


def test_age_counts_from_when_a_message_became_done(repo: SwarmRepository) -> None:
    """A message accepted long ago but verified recently is kept (age is updated_at)."""
    repo.accept(new_message("ses_t", msg_id="msg_slow"), OLD, NOW_MS)
    repo.mark_handed_off("msg_slow", NOW_MS - DAY_MS, verify_by=NOW_MS)
    repo.mark_verified(["msg_slow"], NOW_MS - DAY_MS)
    assert not repo.prune_batch(CUTOFF, 100)
    assert repo.get("msg_slow") is not None


def test_a_requeued_message_is_not_pruned(repo: SwarmRepository) -> None:
    """An old failed message an operator requeued is queued again, so it stays."""
    ended(repo, "msg_f", "failed", OLD)
    assert repo.requeue("msg_f", OLD + 1).value == "changed"
    assert not repo.prune_batch(cutoff_ms(OLD + 2, 0), 100)
    assert repo.get("msg_f") is not None


def test_a_batch_takes_the_oldest_first_and_at_most_limit(repo: SwarmRepository) -> None:
    """One batch deletes no more than its limit, oldest done first."""
    for i in range(5):
        delivered(repo, f"msg_{i}", OLD + (4 - i) * 1000)
    assert sum(repo.prune_batch(CUTOFF, 2).values()) == 2
    assert ids(repo) == {"msg_0", "msg_1", "msg_2"}


def test_prunable_summarises_without_deleting(repo: SwarmRepository) -> None:
    """The summary counts prunable rows by scope and state with their oldest and newest."""
    every_kind_of_row(repo)
    delivered(repo, "msg_verified_older", OLD - 5000)
    summary = {
        (g.scope, g.state): (g.count, g.oldest_at, g.newest_at) for g in repo.prunable(CUTOFF)
    }
    assert summary == {
        ("direct", "handed_off"): (2, OLD - 5000, OLD),
        ("direct", "failed"): (1, OLD, OLD),
        ("direct", "expired"): (1, OLD, OLD),
        ("direct", "cancelled"): (1, OLD, OLD),
        ("channel", "fanned_out"): (1, OLD, OLD),
    }
    assert len(ids(repo)) == 11


# -- cursors after pruning ------------------------------------------------------


def test_inbox_cursors_stay_valid_after_pruning(repo: SwarmRepository) -> None:
    """A cur_N cursor pages on with an honest has_more; a pruned msg_id is unknown."""
    for i in range(1, 4):
        delivered(repo, f"msg_old{i}", OLD)
    for i in range(4, 7):
        delivered(repo, f"msg_new{i}", NOW_MS - DAY_MS, verified=i != 6)
    assert prune_all(repo, CUTOFF) == 3
    assert repo.last_handoff_seq() == 6
    first = repo.inbox_page("ses_t", 0, 2)
    assert [m.msg_id for m in first.messages] == ["msg_new4", "msg_new5"] and first.has_more
    after_two = repo.inbox_page("ses_t", 2, 2)
    assert [m.handoff_seq for m in after_two.messages] == [4, 5] and after_two.has_more
    rest = repo.inbox_page("ses_t", 5, 2)
    assert [m.msg_id for m in rest.messages] == ["msg_new6"] and not rest.has_more
    assert repo.get("msg_old2") is None


# -- the query plan ---------------------------------------------------------------


@pytest.mark.sqlite_only("SQLite's query plan")
def test_prune_searches_the_prunable_index(repo: SwarmRepository) -> None:
    """With history, ANALYZEd or not, a batch is a SEARCH of idx_swarm_prunable, never a SCAN."""
    add_done_rows(repo.sqlite_connection, 5_000, 16, OLD)
    for i in range(200):
        repo.accept(new_message("ses_q", msg_id=f"msg_q{i}"), OLD, NOW_MS + DAY_MS)
    repo.connection.execute("ANALYZE")
    for analyzed in (True, False):
        if not analyzed:
            drop_statistics(repo.sqlite_connection)
        plan = repo.explain_prune(CUTOFF, 500)
        assert "SEARCH swarm_messages USING INDEX idx_swarm_prunable (updated_at<?)" in plan, plan
        assert not any(step.startswith("SCAN") for step in plan), plan


def test_version_4_database_gains_the_prunable_index(tmp_path: Path) -> None:
    """A database at schema version 4 gets idx_swarm_prunable when it is opened."""
    path = tmp_path / "v4.db"
    conn = connect(path)
    migrate(conn, MIGRATIONS[:4])
    conn.close()
    upgraded = open_database(path)
    names = {r[0] for r in upgraded.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    upgraded.close()
    assert "idx_swarm_prunable" in names


# -- giving the space back --------------------------------------------------------


@pytest.mark.sqlite_only("SQLite's incremental vacuum")
def test_a_new_database_is_in_incremental_vacuum_mode(repo: SwarmRepository) -> None:
    """A database pigeond creates can give freed pages back from the start."""
    assert repo.file_size().incremental


def test_an_older_database_is_converted_once_and_logged(tmp_path: Path, logged: list[str]) -> None:
    """A database made without incremental vacuum gets one VACUUM at open, logged; not twice."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    migrate(conn, MIGRATIONS[:4])
    conn.close()
    SwarmRepository(open_database(path, log=Logger())).close()
    converted = SwarmRepository(open_database(path, log=Logger()))
    assert converted.file_size().incremental
    converted.close()
    assert sum("converting" in line and "one-time VACUUM" in line for line in logged) == 1
    assert any("now uses incremental auto-vacuum" in line for line in logged)


def test_a_failed_conversion_is_logged_and_not_fatal(tmp_path: Path, logged: list[str]) -> None:
    """While another writer holds the lock the VACUUM fails: a warning, the file unchanged."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    migrate(conn, MIGRATIONS)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    conn.execute("PRAGMA busy_timeout = 50")
    try:
        assert not use_incremental_vacuum(conn, path, Logger())
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] != AUTO_VACUUM_INCREMENTAL
    conn.close()
    assert any("could not convert" in line and "next start" in line for line in logged)


@pytest.mark.sqlite_only("SQLite's incremental vacuum")
def test_giving_back_pages_is_bounded(repo: SwarmRepository) -> None:
    """At most max_pages free pages go back per call; the rest wait for the next."""
    add_done_rows(repo.sqlite_connection, 2_000, 1024, OLD)
    prune_all(repo, CUTOFF)
    free = repo.file_size().free_pages
    assert free > 100
    assert repo.give_back_pages(100) == 100
    assert repo.file_size().free_pages == free - 100


def test_nothing_is_given_back_without_incremental_mode(tmp_path: Path) -> None:
    """A database not yet converted keeps its freed pages for reuse."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    migrate(conn, MIGRATIONS)
    repo = SwarmRepository(conn)
    add_done_rows(conn, 500, 1024, OLD)
    prune_all(repo, CUTOFF)
    assert repo.file_size().free_pages > 0
    assert repo.give_back_pages(1_000) == 0
    repo.close()


@pytest.mark.sqlite_only("the SQLite file's size (PostgreSQL's VACUUM is its own)")
def test_pruning_shrinks_a_large_database(repo: SwarmRepository, db_path: Path) -> None:
    """20,000 done 1 KiB rows pruned: the file drops below a tenth; undone rows survive."""
    for i in range(20):
        repo.accept(new_message("ses_q", msg_id=f"msg_q{i}", payload="q" * 1024), OLD, NOW_MS)
        delivered(repo, f"msg_u{i}", OLD, verified=False)
    add_done_rows(repo.sqlite_connection, 20_000, 1024, OLD)
    before = repo.file_size()
    assert prune_all(repo, CUTOFF) == 20_000
    while repo.give_back_pages(1_000):
        pass
    after = repo.file_size()
    assert after.total_bytes < before.total_bytes / 10, (before, after)
    assert after.free_pages == 0
    assert db_path.stat().st_size < before.total_bytes / 10
    assert len(repo.list_messages(state="queued")) == 20
    assert len(repo.list_messages(state="handed_off")) == 20
