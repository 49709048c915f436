"""The quiet gate on its own: whose answer window it uses."""

from __future__ import annotations

import os
from pathlib import Path

from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.service.db_watch import Stat
from pigeond.service.quiet import QuietGate
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.database import InlineDatabase
from testkit.messages import new_message
from tests.fixed_time import now_ms

TICK_S = 0.5


def gate_on(path: Path, clock: Clock, stat: Stat = os.stat) -> QuietGate:
    """A gate over the database at ``path``, settled quiet (nothing there is due)."""
    db = InlineDatabase(SwarmRepository(open_database(path)))
    gate = QuietGate(db, clock, str(path), lambda: 60_000, stat=stat)
    gate.tick()
    clock.advance(TICK_S)
    gate.tick()
    assert gate.quiet
    return gate


def test_a_reload_gives_the_gate_the_new_answer_window(tmp_path: Path, clock: Clock) -> None:
    """A message seen 100 s ago awaits an answer under a reloaded turn_timeout_s of 600 s
    (the gate stays busy), not under the 60 s it started with."""
    gate = gate_on(tmp_path / "p.db", clock)
    other = SwarmRepository(open_database(tmp_path / "p.db"))
    other.accept(new_message("ses_w", msg_id="msg_seen"), now_ms(clock))
    other.mark_handed_off_many(["msg_seen"], now_ms(clock), now_ms(clock) + 60_000)
    assert other.mark_verified(["msg_seen"], now_ms(clock)) == ["msg_seen"]
    clock.advance(100)
    gate.configure(Config(turn_timeout_s=600))
    gate.tick()
    assert not gate.quiet
