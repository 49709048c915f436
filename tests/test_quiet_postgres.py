"""The quiet tick on PostgreSQL: no file shows a write, so every write transaction notifies
``pigeond_changed`` and the daemon's listener counts what it hears; an idle tick then
touches no database there either, and a write is seen at the next tick."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock

from pigeond.service.quiet import SAFETY_NET_S, QuietGate, Signature
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.postgres import open_postgres
from pigeond.storage.postgres.notify import DueListener
from testkit.messages import new_message
from testkit.polling import wait_until
from tests.fixed_time import now_ms
from tests.storage_helpers import CountingDatabase

TICK_S = 0.5
PG_URL = "postgresql://pigeond@localhost/pigeond"  # names no file: the gate watches none


class Heard:
    """What a listener has heard so far, as the gate asks it: a count, or None while it
    does not listen."""

    def __init__(self) -> None:
        self.heard: int | None = 0

    def changes(self) -> Signature | None:
        return None if self.heard is None else (self.heard,)


@pytest.fixture
def db(tmp_path: Path) -> CountingDatabase:
    return CountingDatabase(SwarmRepository(open_database(tmp_path / "p.db")))


@pytest.fixture
def heard() -> Heard:
    return Heard()


@pytest.fixture
def gate(db: CountingDatabase, clock: Clock, heard: Heard) -> QuietGate:
    """A gate on a database with no file, watching what ``heard`` says, settled."""
    gate = QuietGate(db, clock, PG_URL, lambda: 60_000)
    gate.watch(heard.changes)
    ticks(gate, clock, 2)
    db.reads.clear()
    return gate


def ticks(gate: QuietGate, clock: Clock, count: int) -> None:
    for _ in range(count):
        clock.advance(TICK_S)
        gate.tick()


def test_without_a_listener_the_gate_is_never_quiet(db: CountingDatabase, clock: Clock) -> None:
    """Nothing to hear writes with (delivery off on PostgreSQL): busy, as before."""
    gate = QuietGate(db, clock, PG_URL, lambda: 60_000)
    ticks(gate, clock, 4)
    assert (gate.watching, gate.quiet) == (False, False)


def test_nothing_heard_the_ticks_up_to_the_safety_net_read_nothing(
    gate: QuietGate, db: CountingDatabase, clock: Clock
) -> None:
    """No write heard: quiet, and no look at the database until the safety net."""
    ticks(gate, clock, int(SAFETY_NET_S / TICK_S) - 2)
    assert gate.quiet and db.reads == []


def test_a_write_heard_is_looked_at_on_the_next_tick(
    gate: QuietGate, db: CountingDatabase, clock: Clock, heard: Heard
) -> None:
    """One notification heard: the next tick is busy (the jobs read) and looks once."""
    seen = gate.changes
    heard.heard = 1
    ticks(gate, clock, 1)
    assert gate.changed_since(seen) and db.reads == ["timed_work_at"]


def test_while_not_listening_every_tick_is_busy(
    gate: QuietGate, db: CountingDatabase, clock: Clock, heard: Heard
) -> None:
    """The listener's connection lost: a write may go unheard, so no tick is quiet and
    every job reads (the gate itself does not add a look)."""
    heard.heard = None
    for _ in range(4):
        seen = gate.changes
        ticks(gate, clock, 1)
        assert not gate.quiet and gate.changed_since(seen)
    assert db.reads == []


class Threads:
    """Calls from the listener's thread, kept rather than run (no reactor here)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def callFromThread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.calls.append((f, args))


@pytest.fixture
def threads() -> Threads:
    return Threads()


@pytest.fixture
def listener(pg_migrated_url: str, threads: Threads) -> Iterator[DueListener]:
    heard = DueListener(pg_migrated_url, threads, lambda target: None)  # type: ignore[arg-type]
    heard.start()
    wait_until(heard.listening.is_set, 10, "the listener's LISTEN")
    yield heard
    heard.stop()


def test_a_write_on_postgresql_is_heard_once_and_a_read_not_at_all(
    listener: DueListener, threads: Threads, pg_migrated_url: str, clock: Clock
) -> None:
    """A read, then a write transaction (another process's: ``pigeon``'s, another
    daemon's): the write is heard once (after its accept's due target, sent first in the
    same transaction), the read not at all, so an idle daemon's gate stays quiet."""
    repo = SwarmRepository(open_postgres(pg_migrated_url))
    before = listener.heard
    repo.count_open()
    repo.accept(new_message("ses_worker"), now_ms(clock), now_ms(clock) + 60_000)
    wait_until(lambda: len(threads.calls) == 1, 10, "the accept's due target")
    wait_until(lambda: listener.heard > before, 10, "the write heard")
    assert listener.changes() == (before + 1,)
