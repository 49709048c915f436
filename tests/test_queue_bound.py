"""A bound on disk: a channel send no member can take is refused (409), and
``max_queued_bytes`` bounds the payload bytes of every undelivered message (507), taken in
the store's transaction (issue 27, measurement 1), on a real SQLite file and PostgreSQL."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from pigeond.api.flood import QUEUE_FULL_RETRY_AFTER_S, FloodGuard
from pigeond.config import Config
from pigeond.storage import AcceptOutcome, SwarmRepository
from pigeond.storage.database import InlineDatabase
from pigeond.storage.engines import POSTGRES
from pigeond.storage.queue_bytes import queued_bytes
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.flood_helpers import route

pytestmark = pytest.mark.both_backends

CHANNEL = "crowd"
MEMBERS = [f"ses_member{i:02}" for i in range(32)]
BIG = 250_000  # a payload near the largest body a send may have (256 KiB)
# What the database takes on disk for each byte of payload it holds: the row, the search
# index's copy of its words (SQLite's FTS5; PostgreSQL's tsvector column and its GIN index)
# and, on SQLite, the WAL's copy of the pages until a checkpoint.  Measured with 16 MiB of
# random five-letter words: 52 MB on SQLite (file and WAL), 71 MB on PostgreSQL.
DISK_PER_PAYLOAD_BYTE = 5


def guard(repo: SwarmRepository, clock: Clock, **options: int) -> FloodGuard:
    """The daemon's guard with the default options but ``options``."""
    return FloodGuard.from_config(InlineDatabase(repo), clock, Config(**options))  # type: ignore[arg-type]


def database_bytes(repo: SwarmRepository, db_path: Path) -> int:
    """What the database takes on disk: the SQLite file and its WAL, or PostgreSQL's size."""
    if repo.engine is POSTGRES:
        return int(
            repo.connection.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        )
    wal = db_path.with_name(db_path.name + "-wal")
    return db_path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def prose(seed: int, size: int) -> str:
    """``size`` characters of random five-letter words: what neither compression (PostgreSQL's
    TOAST) nor the search index can make small."""
    rng = random.Random(seed)
    words = ("".join(rng.choices(string.ascii_lowercase, k=5)) for _ in range(size // 6 + 1))
    return " ".join(words)[:size]


def crowd(repo: SwarmRepository, clock: Clock) -> None:
    for member in MEMBERS:
        repo.join_channel(CHANNEL, member, int(clock.seconds() * 1000), len(MEMBERS))


def queue_bytes(repo: SwarmRepository) -> int:
    return queued_bytes(repo.connection)


def accept(repo: SwarmRepository, clock: Clock, payload: str, bound: int) -> AcceptOutcome:
    message = new_message(payload=payload)
    now_ms = int(clock.seconds() * 1000)
    return repo.accept_many([Accept(message, now_ms, max_queued_bytes=bound)])[0]


# -- a channel send nobody can take -------------------------------------------------------


def test_channel_sends_to_members_at_their_cap_are_409_and_grow_nothing(
    repo: SwarmRepository, clock: Clock, db_path: Path
) -> None:
    """1,000 channel sends of 250 kB to 32 members each at max_queued_per_target: every one
    409, nothing stored, and the database grows by less than 1 MiB."""
    crowd(repo, clock)
    api = route(repo, clock, guard(repo, clock, max_queued_per_target=1))
    for member in MEMBERS:
        assert api.send(**{"to": member})[0] == 202  # each member is now at its cap
    before = database_bytes(repo, db_path)
    payload = "x" * BIG
    answers = [api.send(channel=CHANNEL, payload=payload) for _ in range(1000)]
    assert {status for status, _, _ in answers} == {409}
    assert answers[0][1]["channel"] == CHANNEL
    assert "max_queued_per_target" in answers[0][1]["error"]
    assert database_bytes(repo, db_path) - before < 1024 * 1024
    assert repo.channel_history(CHANNEL, 0, 10).messages == []


def test_a_channel_send_with_no_member_but_the_sender_is_409(
    repo: SwarmRepository, clock: Clock
) -> None:
    """A channel whose only member is the sender: 409, the channel's history stays empty."""
    repo.join_channel(CHANNEL, "ses_sender", int(clock.seconds() * 1000), 32)
    api = route(repo, clock, guard(repo, clock))
    status, body, _ = api.send(channel=CHANNEL, msg_id="msg_alone")
    assert (status, body["channel"]) == (409, CHANNEL)
    assert repo.get("msg_alone") is None


# -- max_queued_bytes ---------------------------------------------------------------------


def test_a_send_past_the_bound_is_507_with_retry_after(repo: SwarmRepository, clock: Clock) -> None:
    """Three 300-byte sends fit in 1,000 bytes; the fourth is 507 naming the option, with
    Retry-After, and is not stored."""
    api = route(repo, clock, guard(repo, clock, max_queued_bytes=1000))
    assert [api.send(payload="p" * 300)[0] for _ in range(3)] == [202] * 3
    status, body, retry_after = api.send(payload="p" * 300, msg_id="msg_over")
    assert status == 507 and "max_queued_bytes" in body["error"]
    assert body["retry_after_s"] == QUEUE_FULL_RETRY_AFTER_S
    assert retry_after == [str(QUEUE_FULL_RETRY_AFTER_S)]
    assert repo.get("msg_over") is None
    assert queue_bytes(repo) == 900


def test_every_channel_copy_counts_and_the_database_stays_near_the_bound(
    repo: SwarmRepository, clock: Clock, db_path: Path
) -> None:
    """250 kB sends of prose to 32 members under a 16 MiB bound: two sends (32 copies each)
    are stored, every later one is 507; the queue holds at most the bound, and the database
    grows by at most DISK_PER_PAYLOAD_BYTE times the bound and the channel's own rows."""
    bound = 16 * 1024 * 1024
    crowd(repo, clock)
    api = route(repo, clock, guard(repo, clock, max_queued_bytes=bound))
    before = database_bytes(repo, db_path)
    statuses = [
        api.send(**{"from": f"ses_rot{i}", "channel": CHANNEL, "payload": prose(i, BIG)})[0]
        for i in range(50)
    ]
    assert statuses == [202] * 2 + [507] * 48
    assert queue_bytes(repo) <= bound
    channel_rows = 2 * (BIG + 3)
    growth = database_bytes(repo, db_path) - before
    assert growth <= DISK_PER_PAYLOAD_BYTE * (bound + channel_rows)


def test_a_group_commit_keeps_to_the_bound(repo: SwarmRepository, clock: Clock) -> None:
    """Accepts stored in one transaction count each other: the third of three 400-byte
    sends under 1,000 bytes is refused, though the group's sum was read once."""
    now_ms = int(clock.seconds() * 1000)
    outcomes = repo.accept_many(
        [Accept(new_message(payload="q" * 400), now_ms, max_queued_bytes=1000) for _ in range(3)]
    )
    assert outcomes == [AcceptOutcome.STORED, AcceptOutcome.STORED, AcceptOutcome.QUEUE_FULL]


def test_a_handed_off_message_frees_its_bytes(repo: SwarmRepository, clock: Clock) -> None:
    """Only undelivered messages count: once one is handed off, another fits."""
    first = new_message(payload="r" * 600)
    assert repo.accept_many([Accept(first, 0, max_queued_bytes=1000)]) == [AcceptOutcome.STORED]
    assert accept(repo, clock, "r" * 600, 1000) is AcceptOutcome.QUEUE_FULL
    assert repo.mark_handed_off(first.msg_id, int(clock.seconds() * 1000))
    assert accept(repo, clock, "r" * 600, 1000) is AcceptOutcome.STORED


def test_bytes_are_utf8_bytes_not_characters(repo: SwarmRepository, clock: Clock) -> None:
    """A payload of 100 'é' is 200 bytes, as the database counts it and as the bound does."""
    assert accept(repo, clock, "é" * 100, 200) is AcceptOutcome.STORED
    assert queue_bytes(repo) == 200
    assert accept(repo, clock, "é", 201) is AcceptOutcome.QUEUE_FULL


def test_a_retry_past_the_bound_is_answered_as_before(repo: SwarmRepository, clock: Clock) -> None:
    """A stored msg_id sent again while the queue is full is a duplicate (a 202), not a 507."""
    api = route(repo, clock, guard(repo, clock, max_queued_bytes=500))
    assert api.send(msg_id="msg_once", payload="s" * 400)[0] == 202
    assert api.send(payload="s" * 400)[0] == 507
    assert api.send(msg_id="msg_once", payload="s" * 400)[0] == 202


def test_zero_means_no_bound(repo: SwarmRepository, clock: Clock) -> None:
    """max_queued_bytes = 0 stores whatever the other limits let through."""
    api = route(repo, clock, guard(repo, clock, max_queued_bytes=0))
    assert [api.send(payload="t" * 100_000)[0] for _ in range(20)] == [202] * 20


def test_a_reload_changes_the_bound_live(repo: SwarmRepository, clock: Clock) -> None:
    """configure() tightens and loosens max_queued_bytes from the next send."""
    flood = guard(repo, clock)
    api = route(repo, clock, flood)
    assert api.send(payload="u" * 500)[0] == 202
    flood.configure(Config(max_queued_bytes=600))
    assert api.send(payload="u" * 500)[0] == 507
    flood.configure(Config(max_queued_bytes=0))
    assert api.send(payload="u" * 500)[0] == 202
