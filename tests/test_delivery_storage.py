"""The delivery state machine in storage: batches, outages, expiry, verification, notices."""

from __future__ import annotations

from pathlib import Path

import pytest

from pigeond.storage import SCHEMA_VERSION, SwarmRepository, open_database
from pigeond.storage.base import QUEUED_FOR_TARGET_SQL
from pigeond.storage.migrations import MIGRATIONS
from pigeond.storage.schema import connect, migrate
from pigeond.storage.synthetic import add_delivered_history, add_stuck_rows, drop_statistics
from testkit.messages import new_message
from tests.fixed_time import NOW_MS
from tests.storage_helpers import accept_channel_alone

pytestmark = pytest.mark.both_backends


def accept(repo: SwarmRepository, msg_id: str, **kwargs: object) -> None:
    expires_at = kwargs.pop("expires_at", None)
    assert expires_at is None or isinstance(expires_at, int)
    repo.accept(new_message(msg_id=msg_id, **kwargs), NOW_MS, expires_at)  # type: ignore[arg-type]


def notices(repo: SwarmRepository, to: str) -> list[tuple[str, str, str | None, str]]:
    page = repo.connection.execute(
        "SELECT kind, from_session, reply_to, payload FROM swarm_messages"
        " WHERE to_session = ? ORDER BY accept_seq",
        (to,),
    )
    return [tuple(r) for r in page.fetchall()]


def _handoff_seq(repo: SwarmRepository, msg_id: str) -> int | None:
    stored = repo.get(msg_id)
    return None if stored is None else stored.handoff_seq


def test_ready_batch_is_priority_then_fifo(repo: SwarmRepository) -> None:
    """A batch lists due messages most urgent first, accept order within a priority."""
    for msg_id, priority in [("msg_l", "low"), ("msg_n", "normal"), ("msg_u", "urgent")]:
        accept(repo, msg_id, priority=priority)
    assert [m.msg_id for m in repo.ready_batch("ses_target", NOW_MS, 10)] == [
        "msg_u", "msg_n", "msg_l",
    ]  # fmt: skip


def test_ready_batch_stops_at_a_message_backing_off(repo: SwarmRepository) -> None:
    """A message waiting out its backoff holds back the ones after it."""
    accept(repo, "msg_1")
    accept(repo, "msg_2")
    accept(repo, "msg_3")
    repo.record_failed_attempt("msg_2", "x", NOW_MS, NOW_MS + 1000)
    assert [m.msg_id for m in repo.ready_batch("ses_target", NOW_MS, 10)] == ["msg_1"]


def test_ready_batch_skips_expired(repo: SwarmRepository) -> None:
    """Expired messages are not in a batch and do not stop it."""
    accept(repo, "msg_old", expires_at=NOW_MS)
    accept(repo, "msg_new", expires_at=NOW_MS + 1000)
    assert [m.msg_id for m in repo.ready_batch("ses_target", NOW_MS, 10)] == ["msg_new"]


def test_handed_off_batch_keeps_its_order(repo: SwarmRepository) -> None:
    """Each message of a batch takes its own hand-off number, in batch order."""
    for msg_id in ("msg_a", "msg_b", "msg_c"):
        accept(repo, msg_id)
    assert repo.mark_handed_off_many(["msg_c", "msg_a", "msg_b"], NOW_MS, NOW_MS + 60_000) == [
        "msg_c", "msg_a", "msg_b",
    ]  # fmt: skip
    seqs = {m: _handoff_seq(repo, m) for m in ("msg_a", "msg_b", "msg_c")}
    assert seqs == {"msg_c": 1, "msg_a": 2, "msg_b": 3}
    stored = repo.get("msg_a")
    assert stored is not None and stored.verify_by == NOW_MS + 60_000


def test_outage_spends_no_attempt(repo: SwarmRepository) -> None:
    """An outage records the reason and the retry time, and leaves attempts alone."""
    accept(repo, "msg_1")
    repo.record_outage(["msg_1"], "connection refused", NOW_MS, NOW_MS + 30_000)
    stored = repo.get("msg_1")
    assert stored is not None
    assert (stored.attempts, stored.last_error, stored.next_retry_at) == (
        0, "connection refused", NOW_MS + 30_000,
    )  # fmt: skip


def test_fail_now_fails_and_notifies(repo: SwarmRepository) -> None:
    """A permanent failure ends the message and queues a notice to the sender session."""
    accept(repo, "msg_1", sender="ses_alice")
    assert repo.fail_now(["msg_1"], "HTTP 400: bad part", NOW_MS) == ["msg_1"]
    stored = repo.get("msg_1")
    assert stored is not None and (stored.state, stored.attempts) == ("failed", 1)
    [(kind, sender, reply_to, payload)] = notices(repo, "ses_alice")
    assert (kind, sender, reply_to) == ("delivery.failed", "pigeond", "msg_1")
    assert "ses_target" in payload and "HTTP 400: bad part" in payload and "attempts: 1" in payload


def test_notice_is_due_and_expires(repo: SwarmRepository) -> None:
    """A notice is queued, due at once, and has the notice time to live."""
    repo.notice_ttl_ms = 5000
    accept(repo, "msg_1", sender="ses_alice")
    repo.fail_now(["msg_1"], "x", NOW_MS)
    [notice] = repo.ready_batch("ses_alice", NOW_MS, 10)
    assert (notice.next_retry_at, notice.expires_at) == (NOW_MS, NOW_MS + 5000)


def test_a_notice_is_from_a_verified_sender(repo: SwarmRepository) -> None:
    """pigeond wrote its own notice, so its sender is verified, not a claim."""
    accept(repo, "msg_1", sender="ses_alice")
    repo.fail_now(["msg_1"], "x", NOW_MS)
    [notice] = repo.ready_batch("ses_alice", NOW_MS, 10)
    assert (notice.from_proof, notice.from_proof_note) == ("verified", "pigeond's own notice")


def test_last_failed_attempt_notifies(repo: SwarmRepository) -> None:
    """Running out of attempts fails the message and notifies the sender."""
    accept(repo, "msg_1", sender="ses_alice")
    repo.record_failed_attempt("msg_1", "HTTP 500", NOW_MS, None)
    assert [n[2] for n in notices(repo, "ses_alice")] == ["msg_1"]


def test_expire_due_expires_and_notifies(repo: SwarmRepository) -> None:
    """Queued direct messages past their time to live become expired, with a notice."""
    accept(repo, "msg_old", sender="ses_alice", expires_at=NOW_MS)
    accept(repo, "msg_live", expires_at=NOW_MS + 1)
    assert repo.expire_due(NOW_MS) == ["msg_old"]
    old = repo.get("msg_old")
    assert old is not None and old.state == "expired" and old.next_retry_at is None
    [(_, _, reply_to, payload)] = notices(repo, "ses_alice")
    assert reply_to == "msg_old" and "expired" in payload
    assert repo.expire_due(NOW_MS) == []


def test_channel_messages_never_expire(repo: SwarmRepository) -> None:
    """Channel messages wait for the channels work: no expiry, no notice."""
    accept_channel_alone(
        repo, new_message(channel="builds", msg_id="msg_c", sender="ses_alice"), NOW_MS, NOW_MS
    )
    assert repo.expire_due(NOW_MS + 10**9) == []


def test_mark_verified(repo: SwarmRepository) -> None:
    """Verification stamps verified_at once, and clears the deadline."""
    accept(repo, "msg_1")
    repo.mark_handed_off("msg_1", NOW_MS, NOW_MS + 60_000)
    assert repo.verification_targets() == ["ses_target"]
    assert repo.mark_verified(["msg_1"], NOW_MS + 5) == ["msg_1"]
    assert repo.mark_verified(["msg_1"], NOW_MS + 9) == []
    stored = repo.get("msg_1")
    assert stored is not None and (stored.verified_at, stored.verify_by) == (NOW_MS + 5, None)
    assert repo.verification_targets() == []


def test_requeue_unverified_until_the_limit(repo: SwarmRepository) -> None:
    """An unseen hand-off is queued again up to the limit, then fails with a notice."""
    accept(repo, "msg_1", sender="ses_alice")
    outcomes = []
    for round_ in range(4):
        repo.mark_handed_off("msg_1", NOW_MS + round_, NOW_MS + round_)
        outcomes.append(repo.requeue_unverified("msg_1", "never seen", NOW_MS + round_, 3))
    assert outcomes == ["queued", "queued", "queued", "failed"]
    stored = repo.get("msg_1")
    assert stored is not None and (stored.state, stored.requeue_count) == ("failed", 3)
    assert len(notices(repo, "ses_alice")) == 1


def test_requeued_message_is_due_now(repo: SwarmRepository) -> None:
    """A requeued message is due at once and keeps its place by priority and accept order."""
    accept(repo, "msg_1")
    accept(repo, "msg_2")
    repo.mark_handed_off("msg_1", NOW_MS, NOW_MS)
    repo.requeue_unverified("msg_1", "never seen", NOW_MS + 7, 3)
    assert [m.msg_id for m in repo.ready_batch("ses_target", NOW_MS + 7, 10)] == ["msg_1", "msg_2"]


def test_requeue_of_changed_row_does_nothing(repo: SwarmRepository) -> None:
    """A message verified meanwhile is not requeued."""
    accept(repo, "msg_1")
    repo.mark_handed_off("msg_1", NOW_MS, NOW_MS)
    repo.mark_verified(["msg_1"], NOW_MS)
    assert repo.requeue_unverified("msg_1", "never seen", NOW_MS, 3) is None


def test_rehanded_message_appears_again_in_inbox(repo: SwarmRepository) -> None:
    """A message handed off again appears again at its new place in the inbox."""
    accept(repo, "msg_1")
    accept(repo, "msg_2")
    repo.mark_handed_off("msg_1", NOW_MS, NOW_MS)
    repo.mark_handed_off("msg_2", NOW_MS, NOW_MS)
    repo.requeue_unverified("msg_1", "never seen", NOW_MS, 3)
    repo.mark_handed_off("msg_1", NOW_MS + 1, NOW_MS + 1)
    page = repo.inbox_page("ses_target", 0, 10)
    assert [m.msg_id for m in page.messages] == ["msg_2", "msg_1"]


def test_count_queued_for_counts_one_targets_queue_up_to_a_limit(repo: SwarmRepository) -> None:
    """Only the target's queued direct messages count, and counting stops at at_most."""
    for i in range(4):
        accept(repo, f"msg_q{i}")
    accept(repo, "msg_other", to="ses_other")
    accept(repo, "msg_chan", channel="general")
    accept(repo, "msg_done")
    repo.mark_handed_off("msg_done", NOW_MS)
    accept(repo, "msg_failed", sender="cli-user")
    repo.fail_now(["msg_failed"], "gone", NOW_MS)
    assert repo.count_queued_for("ses_target") == 4
    assert repo.count_queued_for("ses_target", at_most=2) == 2
    assert repo.count_queued_for("ses_target", at_most=0) == 0
    assert repo.count_queued_for("ses_nobody") == 0


@pytest.mark.sqlite_only("SQLite's query plan")
def test_count_queued_for_searches_an_index(repo: SwarmRepository) -> None:
    """With history, ANALYZEd or not, the count is a covering-index SEARCH, never a table SCAN."""
    add_delivered_history(repo.sqlite_connection, 20_000, 10, NOW_MS - 10_000)
    add_stuck_rows(repo.sqlite_connection, 5_000, 1_000, 10, NOW_MS)
    for analyzed in (True, False):
        if not analyzed:
            drop_statistics(repo.sqlite_connection)
        plan = [
            str(r[3])
            for r in repo.connection.execute(
                "EXPLAIN QUERY PLAN " + QUEUED_FOR_TARGET_SQL, {"target": "ses_t1", "limit": 1000}
            ).fetchall()
        ]
        assert any(
            step.startswith("SEARCH swarm_messages USING COVERING INDEX") and "to_session=?" in step
            for step in plan
        ), plan
        assert not any(step.startswith("SCAN swarm_messages") for step in plan), plan
    assert repo.count_queued_for("ses_t1", at_most=1000) == 500


def test_version_2_database_upgrades(tmp_path: Path) -> None:
    """A database at schema version 2 upgrades in place, its rows kept."""
    path = tmp_path / "v2.db"
    conn = connect(path)
    migrate(conn, MIGRATIONS[:2])
    conn.execute(
        "INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, payload,"
        " next_retry_at, created_at, updated_at, accept_seq) VALUES"
        " ('msg_1', 'ses_a', 'ses_b', 'chat', 'p', 0, 0, 0, 1)"
    )
    conn.close()
    repo = SwarmRepository(open_database(path))
    stored = repo.get("msg_1")
    assert stored is not None and (stored.requeue_count, stored.expires_at) == (0, None)
    assert repo.connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_is_stored_tells_a_retry(repo: SwarmRepository) -> None:
    """is_stored: true for a stored msg_id in any state, false for a new one."""
    repo.accept(new_message("ses_t", msg_id="msg_0"), NOW_MS)
    assert repo.mark_handed_off("msg_0", NOW_MS)
    assert repo.is_stored("msg_0") and not repo.is_stored("msg_new")
