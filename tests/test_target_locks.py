"""Per-target exclusivity across daemons on one PostgreSQL: the arbiter drains a target
only while it holds the target's lock, and PostgreSQL's advisory locks are that lock."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from pigeond.storage import SwarmRepository
from pigeond.storage.postgres import open_postgres
from pigeond.storage.postgres.connection import PgConnection
from pigeond.storage.postgres.locks import PgTargetLocks
from testkit.messages import new_message
from tests.arbiter_harness import TICK_S, Harness, make_harness


@dataclass
class SharedLocks:
    """The locks as another daemon sees them: ``others`` are held elsewhere."""

    others: set[str] = field(default_factory=set)
    ours: set[str] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)  # ours, but their connection died
    calls: list[tuple[str, str]] = field(default_factory=list)

    def acquire(self, target: str) -> Deferred[bool]:
        self.calls.append(("acquire", target))
        if target in self.others:
            return succeed(False)
        self.ours.add(target)
        return succeed(True)

    def held(self, target: str) -> Deferred[bool]:
        self.calls.append(("held", target))
        return succeed(target in self.ours and target not in self.lost)

    def release(self, target: str) -> Deferred[None]:
        self.calls.append(("release", target))
        self.ours.discard(target)
        return succeed(None)


@pytest.fixture
def locks() -> SharedLocks:
    return SharedLocks()


@pytest.fixture
def h(repo: SwarmRepository, clock: Clock, locks: SharedLocks) -> Harness:
    harness = make_harness(repo, clock, target_locks=locks)
    harness.arbiter.start()
    return harness


def test_a_target_another_daemon_drains_gets_nothing_from_us(
    h: Harness, locks: SharedLocks
) -> None:
    """While another daemon holds the target's lock, no prompt goes; once it lets go, the
    next tick drains the target."""
    locks.others.add("ses_target")
    msg_id = h.send()
    h.clock.advance(TICK_S)
    assert h.prompts_to("ses_target") == [] and h.state(msg_id) == "queued"
    locks.others.clear()
    h.clock.advance(TICK_S)
    [prompt] = h.prompts_to("ses_target")
    assert prompt.msg_ids() == [msg_id]


def test_the_lock_is_held_for_the_whole_drain_and_then_given_back(
    h: Harness, locks: SharedLocks
) -> None:
    """Taken before the queue is read, asked again before the prompt goes, released once
    the hand-off is recorded."""
    h.send()
    h.arbiter.kick("ses_target")
    assert locks.ours == {"ses_target"}
    assert locks.calls == [("acquire", "ses_target"), ("held", "ses_target")]
    h.opencode.succeed_all()
    assert locks.calls[-1] == ("release", "ses_target") and locks.ours == set()


def test_a_lock_lost_before_the_prompt_sends_nothing(h: Harness, locks: SharedLocks) -> None:
    """A lock whose connection died (another daemon may drain now) stops the drain before
    the prompt: the message stays queued, no attempt spent."""
    locks.lost.add("ses_target")
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    assert ("held", "ses_target") in locks.calls
    assert h.prompts_to("ses_target") == []
    stored = h.repo.get(msg_id)
    assert stored is not None and (stored.state, stored.attempts) == ("queued", 0)


@pytest.mark.slow
def test_postgresql_gives_a_target_s_lock_to_one_session_at_a_time(pg_migrated_url: str) -> None:
    """Two daemons' lock connections: the second cannot take a held lock, can after the
    release, and a lock dies with its connection."""
    first, second = PgTargetLocks(pg_migrated_url), PgTargetLocks(pg_migrated_url)
    try:
        assert first.acquire("ses_t") is True and first.held("ses_t") is True
        assert second.acquire("ses_t") is False
        assert second.acquire("ses_other") is True
        first.release("ses_t")
        assert first.held("ses_t") is False and second.acquire("ses_t") is True
        second._conn.raw.close()  # the connection dies (kill -9, a cut network)
        assert second.held("ses_t") is False
        assert first.acquire("ses_t") is True
    finally:
        first.close()
        second.close()


@pytest.mark.slow
def test_a_row_another_session_has_locked_is_skipped_not_waited_for(pg_migrated_url: str) -> None:
    """On PostgreSQL the hand-off's claim skips a row another transaction holds (FOR UPDATE
    SKIP LOCKED): it is not marked, and stays queued for a later drain."""
    repo = SwarmRepository(
        open_postgres(pg_migrated_url, lock_timeout_ms=500)
    )  # waiting would fail
    other = PgConnection(pg_migrated_url)
    try:
        repo.accept(new_message("ses_t", msg_id="msg_busy"), 1000)
        repo.accept(new_message("ses_t", msg_id="msg_free"), 1000)
        other.execute("BEGIN")
        other.execute("SELECT 1 FROM swarm_messages WHERE msg_id = 'msg_busy' FOR UPDATE")
        assert repo.mark_handoff_intents([(["msg_busy", "msg_free"], 2000)]) == [["msg_free"]]
        other.execute("ROLLBACK")
        busy = repo.get("msg_busy")
        assert busy is not None and (busy.state, busy.handoff_intent_at) == ("queued", None)
    finally:
        repo.close()
        other.close()
