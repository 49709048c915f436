"""What the ``pigeon-tui`` tests share: seeded databases, and running the app headless.

The builders are plain functions; each test module wraps the ones it needs in
its own fixtures.  The app runs under ``asyncio.run`` in plain sync tests, so it
does not meet pytest-twisted's reactor.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

from textual.coordinate import Coordinate
from textual.pilot import Pilot
from textual.widgets import DataTable
from textual.worker import WorkerCancelled

from pigeond.costs import EndedTurn, TurnUsage
from pigeond.model import Hold
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.repository import Accept
from pigeond_tui.app import PigeonApp
from pigeond_tui.permissions import Answer
from testkit.messages import new_message
from tests.fixed_time import NOW_MS
from tests.hostile_text import EVIL, EVIL_SHOWN
from tests.storage_helpers import accept_channel_alone

NOW = NOW_MS
LATER = NOW + 90_000  # the app's clock: every seeded message is 1m old
HOUR = 3_600_000

EVIL_ID = "msg_[b]e[/b]" + EVIL  # markup too: it must show as written, not turn bold
EVIL_ID_SHOWN = "msg_[b]e[/b]" + EVIL_SHOWN
EVIL_PAYLOAD = "one " + EVIL + "\ntwo [link=https://evil.example]x[/link]"

Script = Callable[[PigeonApp, Pilot[None]], Awaitable[None]]


def seed(path: Path) -> Path:
    """Queued (two to ses_a), failed and delivered (to ses_b), and a channel message."""
    repo = SwarmRepository(open_database(path))
    repo.accept(new_message("ses_a", msg_id="msg_q1", payload="alpha <b>"), NOW, NOW + HOUR)
    repo.accept(new_message("ses_a", msg_id="msg_q2", kind="status.update"), NOW + 1, NOW + HOUR)
    repo.accept(new_message("ses_b", msg_id="msg_f", sender="cron"), NOW + 2, NOW + HOUR)
    repo.record_failed_attempt("msg_f", "HTTP 500: boom", NOW + 3, None)
    repo.accept(new_message("ses_b", msg_id="msg_d"), NOW + 4, NOW + HOUR)
    assert repo.mark_handed_off("msg_d", NOW + 5)
    accept_channel_alone(repo, new_message(channel="ops", msg_id="msg_c"), NOW + 6)
    repo.close()
    return path


def seed_evil(path: Path) -> Path:
    """One queued message written by another tool: escapes, U+202E and markup in every field."""
    repo = SwarmRepository(open_database(path))
    evil = new_message(
        "ses_a" + EVIL, msg_id=EVIL_ID, sender="ses_s[b]x[/b]" + EVIL, kind="chat" + EVIL,
        payload=EVIL_PAYLOAD,
    )  # fmt: skip
    repo.accept(evil, NOW, NOW + HOUR)
    repo.close()
    return path


MAX_MEMBERS = 32  # members a channel may have


def seed_addressing(path: Path) -> Path:
    """reviewer (ses_a, named an hour ago) and writer (ses_b); dev has ses_c, ops has
    ses_a and ses_b, and reviewer sent ops a message."""
    repo = SwarmRepository(open_database(path))
    repo.claim_name("reviewer", "ses_a", NOW - HOUR)
    repo.claim_name("writer", "ses_b", NOW)
    repo.join_channel("dev", "ses_c", NOW, MAX_MEMBERS)
    repo.join_channel("ops", "ses_a", NOW, MAX_MEMBERS)
    repo.join_channel("ops", "ses_b", NOW + 1, MAX_MEMBERS)
    accept_channel_alone(repo, new_message(channel="ops", sender="ses_a", msg_id="msg_c"), NOW + 2)
    repo.close()
    return path


# What real traffic looks like: pigeond's 21-character msg_ids, opencode's
# 30-character session ids, the longest kind, and an error longer than any screen.
REAL_TARGET = "ses_6ee0b0c1dffe2ZzJkq2QpW7b9q"
REAL_SENDER = "ses_6ee0a7f3affeqXkD0cLr1N2s8v"
LONG_ERROR = "HTTP 500: " + "upstream model provider returned an error; " * 4


def seed_real(path: Path) -> Path:
    """Six messages with real-length ids, names and errors: failed (from cron, so no
    notice with a random id is queued), queued after a failed attempt, delivered, queued."""
    repo = SwarmRepository(open_database(path))
    for i in range(6):
        message = new_message(
            REAL_TARGET, msg_id=f"msg_mhfz{i}k3q_9f3a6c1{i}",
            sender="cron" if i == 0 else REAL_SENDER, kind="clarification.request",
        )  # fmt: skip
        repo.accept(message, NOW + i, NOW + HOUR)
    repo.record_failed_attempt("msg_mhfz0k3q_9f3a6c10", LONG_ERROR, NOW + 10, None)
    repo.record_failed_attempt("msg_mhfz1k3q_9f3a6c11", LONG_ERROR, NOW + 11, NOW + HOUR)
    assert repo.mark_handed_off("msg_mhfz2k3q_9f3a6c12", NOW + 12)
    repo.close()
    return path


# What the held view tests share: a thread whose agents sent two messages, one turn
# recorded, and a third held by a brake.
A, B = "ses_a", "ses_b"
THREAD = "thr_tui"
HOPS = Hold("hops", f"thread {THREAD} reached 2 hops without a person; a person must release it")
BUDGET = Hold("budget", f"thread {THREAD} used 52,310 tokens, over its budget of 50,000")
PAIR = Hold("pair_rate", "ses_a sent ses_b 31 messages in a minute; a person must release it")
USAGE = TurnUsage(input=50_000, output=2_310, cost=0.25)


def send_in_thread(
    repo: SwarmRepository, msg_id: str, hold: Hold | None = None, at: int = NOW
) -> None:
    message = new_message(B, msg_id=msg_id, sender=A, payload=f"echo {msg_id}")
    repo.accept_many([Accept(message, at, at + 60_000, thread_id=THREAD, brake_hold=hold)])


def seed_held(path: Path, hold: Hold = HOPS) -> Path:
    """Thread thr_tui: msg_went was delivered and cost one turn (52,310 tokens, $0.25),
    msg_next went too (two hops), and msg_held waits for a person, held by ``hold``."""
    repo = SwarmRepository(open_database(path))
    send_in_thread(repo, "msg_went")
    repo.mark_handed_off("msg_went", NOW, NOW + 60_000)
    assert repo.mark_verified(["msg_went"], NOW) == ["msg_went"]
    repo.record_turns(B, [EndedTurn("u1", ("msg_went",), USAGE)], NOW)
    send_in_thread(repo, "msg_next", at=NOW + 1)
    send_in_thread(repo, "msg_held", hold, at=NOW + 2)
    repo.close()
    return path


def drive(
    path: Path,
    script: Script,
    *,
    size: tuple[int, int] = (160, 50),
    notifications: bool = False,
    answer_permission: Answer | None = None,
) -> PigeonApp:
    """Run the app headless (no timer refresh: interval one hour) and play ``script``;
    ``answer_permission`` stands for the daemon that answers permission requests."""
    app = PigeonApp(path, clock=lambda: LATER, interval=3600, answer_permission=answer_permission)

    async def run() -> None:
        async with app.run_test(size=size, notifications=notifications) as pilot:
            await settle(app, pilot)
            await script(app, pilot)

    asyncio.run(run())
    return app


async def settle(app: PigeonApp, pilot: Pilot[None]) -> None:
    """Let workers finish and their results reach the screen.  A refresh that a newer one
    replaced (an exclusive worker, cancelled) has nothing to wait for; a worker that
    failed still fails the test."""
    for _ in range(3):
        await pilot.pause()
        for worker in list(app.workers):
            with contextlib.suppress(WorkerCancelled):
                await worker.wait()
    await pilot.pause()


def table_rows(app: PigeonApp, selector: str) -> list[list[str]]:
    """The cells of the current screen's table ``selector``, as shown, row by row."""
    table = app.screen.query_one(selector, DataTable)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


def table_keys(app: PigeonApp, selector: str) -> list[str]:
    table = app.query_one(selector, DataTable)
    return [
        str(table.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value)
        for i in range(table.row_count)
    ]


async def highlight(app: PigeonApp, pilot: Pilot[None], msg_id: str) -> None:
    table = app.query_one("#messages", DataTable)
    table.move_cursor(row=table.get_row_index(msg_id))
    await pilot.pause()


def all_rows(path: Path) -> dict[str, tuple[str, int]]:
    """Every message's (state, updated_at), read behind the app's back."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT msg_id, state, updated_at FROM swarm_messages").fetchall()
        return {str(m): (str(s), int(u)) for m, s, u in rows}
    finally:
        conn.close()
