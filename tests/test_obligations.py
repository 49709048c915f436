"""Owed replies in storage: made with the send, met by the debtor's reply, reminded once,
then overdue once, cancelled with their original (pigeond/storage/obligations.py)."""

from __future__ import annotations

import pytest

from pigeond.model import NOTICE_SENDER, OVERDUE_KIND, REMINDER_KIND, StoredMessage
from pigeond.owed_replies import Owed
from pigeond.storage import AcceptOutcome, SwarmRepository
from pigeond.storage.migrations import _V10_OBLIGATIONS
from pigeond.storage.obligations import DUE_SQL
from pigeond.storage.repository import Accept
from testkit.messages import new_message

pytestmark = pytest.mark.both_backends
T0 = 1_000_000
WITHIN_MS = 60_000
ASKER, WORKER = "ses_asker", "ses_worker"


def ask(repo: SwarmRepository, msg_id: str = "msg_ask", within_ms: int = WITHIN_MS) -> None:
    """ASKER sends WORKER a message that expects a reply, handed off at T0."""
    message = new_message(WORKER, msg_id=msg_id, sender=ASKER, payload="\n  Build it\nthen test")
    assert repo.accept_many([Accept(message, T0, reply_within_ms=within_ms)]) == [
        AcceptOutcome.STORED
    ]
    assert repo.mark_handed_off_many([msg_id], T0) == [msg_id]


def reply(repo: SwarmRepository, sender: str = WORKER, to: str = "msg_ask", at: int = T0) -> None:
    message = new_message(ASKER, msg_id=f"msg_re_{sender}_{at}", sender=sender, reply_to=to)
    assert repo.accept_many([Accept(message, at)]) == [AcceptOutcome.STORED]


def queued_from_pigeond(repo: SwarmRepository) -> list[StoredMessage]:
    rows = repo.connection.execute(
        "SELECT msg_id FROM swarm_messages WHERE from_session = ? ORDER BY accept_seq",
        (NOTICE_SENDER,),
    ).fetchall()
    found = [repo.get(msg_id) for (msg_id,) in rows]
    return [m for m in found if m is not None]


def state_of(repo: SwarmRepository, msg_id: str = "msg_ask") -> str:
    obligation = repo.obligation(msg_id)
    assert obligation is not None
    return obligation.state


def test_a_send_that_expects_a_reply_makes_the_target_owe_the_sender(repo: SwarmRepository) -> None:
    """The obligation is stored with the send: the target owes, the sender is owed."""
    ask(repo)
    assert [o.msg_id for o in repo.owed(WORKER).owes] == ["msg_ask"]
    assert [o.msg_id for o in repo.owed(ASKER).owed] == ["msg_ask"]
    assert repo.owed(ASKER).owes == [] and repo.owed(WORKER).owed == []


def test_a_send_without_reply_expected_owes_nothing(repo: SwarmRepository) -> None:
    """reply_within_ms 0: no obligation row."""
    message = new_message(WORKER, msg_id="msg_plain", sender=ASKER)
    repo.accept_many([Accept(message, T0)])
    assert repo.obligation("msg_plain") is None


def test_the_debtor_s_reply_meets_the_obligation(repo: SwarmRepository) -> None:
    """A message from the target with reply_to = msg_id marks it met, by that reply."""
    ask(repo)
    reply(repo, at=T0 + 5)
    obligation = repo.obligation("msg_ask")
    assert obligation is not None
    assert (obligation.state, obligation.met_at) == (Owed.MET, T0 + 5)
    assert obligation.met_by == f"msg_re_{WORKER}_{T0 + 5}"
    assert repo.owed(WORKER).owes == []


def test_a_reply_from_someone_else_meets_nothing(repo: SwarmRepository) -> None:
    """Only the debtor can meet its obligation."""
    ask(repo)
    reply(repo, sender="ses_other")
    assert state_of(repo) == Owed.OPEN


def test_nothing_is_due_before_the_time_after_the_hand_off(repo: SwarmRepository) -> None:
    """The clock starts at the hand-off: one ms before it runs out, no step is due."""
    ask(repo)
    assert not repo.obligations_due(T0 + WITHIN_MS - 1)
    assert repo.obligations_due(T0 + WITHIN_MS)


def test_a_queued_message_owes_nothing_yet(repo: SwarmRepository) -> None:
    """Not handed off: however long it waits, no reminder falls due."""
    message = new_message(WORKER, msg_id="msg_wait", sender=ASKER)
    repo.accept_many([Accept(message, T0, reply_within_ms=WITHIN_MS)])
    assert not repo.obligations_due(T0 + 100 * WITHIN_MS)


def test_an_unmet_obligation_reminds_the_debtor_once(repo: SwarmRepository) -> None:
    """Due: one reply.reminder from pigeond to the debtor, quoting msg_id and first line."""
    ask(repo)
    done = repo.sweep_obligations(T0 + WITHIN_MS)
    assert (done.reminded, done.targets) == (1, [WORKER])
    [reminder] = queued_from_pigeond(repo)
    assert (reminder.kind, reminder.to_session, reminder.reply_to) == (
        REMINDER_KIND, WORKER, "msg_ask",
    )  # fmt: skip
    assert "msg_ask" in reminder.payload and '"Build it"' in reminder.payload
    assert state_of(repo) == Owed.REMINDED
    assert repo.sweep_obligations(T0 + WITHIN_MS + 1).reminded == 0
    assert len(queued_from_pigeond(repo)) == 1


def test_a_reminder_is_from_a_verified_sender(repo: SwarmRepository) -> None:
    """A reminder is pigeond's own message: the envelope says its sender is verified."""
    ask(repo)
    repo.sweep_obligations(T0 + WITHIN_MS)
    [reminder] = queued_from_pigeond(repo)
    assert reminder.from_proof == "verified"


def test_still_unmet_after_the_reminder_the_creditor_is_told_once(repo: SwarmRepository) -> None:
    """The same time again after the reminder: one reply.overdue to the sender, then no more."""
    ask(repo)
    repo.sweep_obligations(T0 + WITHIN_MS)
    assert not repo.obligations_due(T0 + 2 * WITHIN_MS - 1)
    done = repo.sweep_obligations(T0 + 2 * WITHIN_MS)
    assert (done.overdue, done.targets) == (1, [ASKER])
    notice = queued_from_pigeond(repo)[-1]
    assert (notice.kind, notice.to_session, notice.reply_to) == (OVERDUE_KIND, ASKER, "msg_ask")
    assert WORKER in notice.payload
    assert state_of(repo) == Owed.OVERDUE
    assert not repo.obligations_due(T0 + 100 * WITHIN_MS)
    assert [o.msg_id for o in repo.owed(WORKER).owes] == ["msg_ask"]  # still owed


def test_a_late_reply_meets_an_overdue_obligation(repo: SwarmRepository) -> None:
    """Overdue is not the end: the reply, when it comes, still meets it."""
    ask(repo)
    repo.sweep_obligations(T0 + WITHIN_MS)
    repo.sweep_obligations(T0 + 2 * WITHIN_MS)
    reply(repo, at=T0 + 3 * WITHIN_MS)
    assert state_of(repo) == Owed.MET


def test_a_cancelled_original_cancels_its_obligation(repo: SwarmRepository) -> None:
    """Nobody can answer what never arrives: the sweep cancels it, no reminder."""
    message = new_message(WORKER, msg_id="msg_ask", sender=ASKER)
    repo.accept_many([Accept(message, T0, reply_within_ms=WITHIN_MS)])
    repo.cancel("msg_ask", T0 + 1)
    assert repo.obligations_due(T0 + 2)
    assert repo.sweep_obligations(T0 + 2).cancelled == 1
    assert state_of(repo) == Owed.CANCELLED
    assert queued_from_pigeond(repo) == []


def test_a_failed_original_cancels_its_obligation(repo: SwarmRepository) -> None:
    """A message that failed owes nothing either."""
    ask(repo)
    repo.connection.execute("UPDATE swarm_messages SET state = 'failed' WHERE msg_id = 'msg_ask'")
    assert repo.sweep_obligations(T0 + 1).cancelled == 1
    assert state_of(repo) == Owed.CANCELLED


def test_requeueing_a_failed_original_opens_its_obligation_again(repo: SwarmRepository) -> None:
    """An operator's requeue makes the message live again, and so what is owed for it."""
    ask(repo)
    repo.connection.execute("UPDATE swarm_messages SET state = 'failed' WHERE msg_id = 'msg_ask'")
    repo.sweep_obligations(T0 + 1)
    assert repo.requeue("msg_ask", T0 + 2).name == "CHANGED"
    assert state_of(repo) == Owed.OPEN


def test_a_reminder_that_cannot_be_delivered_is_dropped_not_failed(repo: SwarmRepository) -> None:
    """pigeond's own messages end dropped when undeliverable, and tell nobody."""
    ask(repo)
    repo.sweep_obligations(T0 + WITHIN_MS)
    [reminder] = queued_from_pigeond(repo)
    repo.fail_now([reminder.msg_id], "no such session", T0 + WITHIN_MS + 1)
    ended = repo.get(reminder.msg_id)
    assert ended is not None and ended.state == "dropped"
    assert len(queued_from_pigeond(repo)) == 1  # no delivery.failed about it


def test_pruning_a_message_removes_its_obligation(repo: SwarmRepository) -> None:
    """The trigger keeps no obligation of a message that is gone."""
    ask(repo)
    repo.connection.execute("DELETE FROM swarm_messages WHERE msg_id = 'msg_ask'")
    assert repo.obligation("msg_ask") is None


def test_the_schema_allows_exactly_the_owed_states() -> None:
    """The CHECK constraint and the Owed enum name the same states."""
    allowed = _V10_OBLIGATIONS.split("CHECK (state IN (")[1].split("))")[0]
    assert {s.strip(" '\n") for s in allowed.split(",")} == {str(s) for s in Owed}


@pytest.mark.sqlite_only("SQLite's query plan")
def test_the_sweep_reads_only_outstanding_obligations(repo: SwarmRepository) -> None:
    """Its query walks the partial index of outstanding rows and finds each message by its
    key: history never makes the every-tick sweep slower."""
    plan = [
        str(row[3])
        for row in repo.connection.execute("EXPLAIN QUERY PLAN " + DUE_SQL, {"now": 0, "limit": 1})
    ]
    assert any("USING INDEX idx_swarm_obligations_outstanding" in step for step in plan)
    assert not any(step.startswith("SCAN") for step in plan)
