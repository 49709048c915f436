"""The arbiter's ready-targets query stays on the partial index however much history there is.

Timings are the business of ``bench/ready_targets.py``; these tests check the
plan SQLite chooses, which is what makes the cost independent of history.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.synthetic import add_delivered_history, drop_statistics
from testkit.messages import new_message
from tests.fixed_time import NOW_MS
from tests.storage_helpers import accept_channel_alone

HISTORY_ROWS = 1_000_000
HISTORY_TARGETS = 100
RETRY_IN_MS = 60_000


def assert_ready_plan(plan: list[str]) -> None:
    """The plan searches idx_swarm_ready and scans nothing."""
    assert any(step.startswith("SEARCH") and "idx_swarm_ready" in step for step in plan), plan
    assert not any("SCAN" in step for step in plan), plan


def test_ready_plan_on_an_empty_table(repo: SwarmRepository) -> None:
    """A fresh database already answers ready-targets from the partial index."""
    assert_ready_plan(repo.explain_ready_targets(NOW_MS))


@pytest.fixture(scope="module")
def big_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SwarmRepository]:
    """A WAL database with a million delivered rows and a handful of queued messages."""
    path = tmp_path_factory.mktemp("ready_plan") / "pigeond.db"
    repo = SwarmRepository(open_database(path))
    add_delivered_history(repo.sqlite_connection, HISTORY_ROWS, HISTORY_TARGETS, NOW_MS - 10_000)

    # Due now: two targets of their own and one that also has history.
    for target in ("ses_due_a", "ses_due_a", "ses_due_b", "ses_t7"):
        repo.accept(new_message(target), NOW_MS - 5_000)
    # Queued but not due: accepted in the future, and waiting out a backoff.
    repo.accept(new_message("ses_accepted_later"), NOW_MS + 1_000)
    backing_off = new_message("ses_backing_off")
    repo.accept(backing_off, NOW_MS - 5_000)
    repo.record_failed_attempt(backing_off.msg_id, "refused", NOW_MS - 4_000, NOW_MS + RETRY_IN_MS)
    # Due channel messages have no target; failed and handed-off ones are not queued.
    accept_channel_alone(repo, new_message(channel="general"), NOW_MS - 5_000)
    failed = new_message("ses_failed", sender="cli-user")  # a script: no notice back
    repo.accept(failed, NOW_MS - 5_000)
    repo.record_failed_attempt(failed.msg_id, "gone", NOW_MS - 4_000, None)
    delivered = new_message("ses_delivered")
    repo.accept(delivered, NOW_MS - 5_000)
    repo.mark_handed_off(delivered.msg_id, NOW_MS - 4_000)

    yield repo
    repo.close()


@pytest.mark.slow
def test_big_table_holds_a_million_delivered_rows(big_repo: SwarmRepository) -> None:
    """The fixture really is the million-row case the plan tests claim to cover."""
    counts = big_repo.count_by_state()
    assert counts["handed_off"] == HISTORY_ROWS + 1
    assert counts["queued"] == 6


@pytest.mark.slow
def test_ready_plan_with_a_million_delivered_rows(big_repo: SwarmRepository) -> None:
    """With a million delivered rows, ANALYZEd, the plan is a SEARCH on idx_swarm_ready."""
    assert_ready_plan(big_repo.explain_ready_targets(NOW_MS))


@pytest.mark.slow
def test_ready_plan_without_statistics(big_repo: SwarmRepository, tmp_path: Path) -> None:
    """Without ANALYZE statistics, as the daemon leaves its file, the plan is the same."""
    # A copy, so the module's database keeps its statistics; a fresh connection
    # also cannot hand back an EXPLAIN prepared before the schema changed.
    copy = sqlite3.connect(str(tmp_path / "copy.db"), isolation_level=None)
    try:
        big_repo.sqlite_connection.backup(copy)
        drop_statistics(copy)
        assert_ready_plan(SwarmRepository(copy).explain_ready_targets(NOW_MS))
    finally:
        copy.close()


@pytest.mark.slow
def test_ready_targets_are_the_targets_with_due_queued_messages(
    big_repo: SwarmRepository,
) -> None:
    """Only targets with a due queued message, each once; later ones once they are due."""
    assert sorted(big_repo.ready_targets(NOW_MS)) == ["ses_due_a", "ses_due_b", "ses_t7"]
    assert sorted(big_repo.ready_targets(NOW_MS + RETRY_IN_MS)) == [
        "ses_accepted_later",
        "ses_backing_off",
        "ses_due_a",
        "ses_due_b",
        "ses_t7",
    ]
