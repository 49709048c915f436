"""The storage layer: schema, migrations, and every state change on swarm_messages."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeond.model import State, StoredMessage
from pigeond.storage import (
    SCHEMA_VERSION,
    AcceptOutcome,
    SchemaError,
    StorageUnavailable,
    SwarmRepository,
    connect,
    migrate,
    open_database,
)
from pigeond.storage.migrations import MIGRATIONS
from pigeond.storage.repository import (
    INBOX_PAGE_SQL,
    inbox_entry_bytes,
    inbox_entry_bytes_at_most,
)
from testkit.messages import new_message
from tests.fixed_time import NOW_MS
from tests.storage_helpers import (
    accept_channel_alone,
    column_names,
    reopened,
    stored_schema_version,
)

pytestmark = pytest.mark.both_backends

SEED_COLUMNS = [
    # name, type, notnull, default, pk
    ("msg_id", "TEXT", 0, None, 1),
    ("from_session", "TEXT", 1, None, 0),
    ("to_session", "TEXT", 0, None, 0),
    ("channel", "TEXT", 0, None, 0),
    ("kind", "TEXT", 1, None, 0),
    ("priority", "TEXT", 1, "'normal'", 0),
    ("reply_to", "TEXT", 0, None, 0),
    ("payload", "TEXT", 1, None, 0),
    ("state", "TEXT", 1, "'queued'", 0),
    ("attempts", "INTEGER", 1, "0", 0),
    ("next_retry_at", "INTEGER", 0, None, 0),
    ("created_at", "INTEGER", 1, None, 0),
    ("updated_at", "INTEGER", 1, None, 0),
    ("handed_off_at", "INTEGER", 0, None, 0),
]

SEED_INDEXES = {
    "idx_swarm_target_state": ["to_session", "state", "next_retry_at", "created_at"],
    "idx_swarm_inbox": ["to_session", "state", "msg_id"],
    "idx_swarm_channel": ["channel", "state", "created_at"],
}


def _columns(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
    return [tuple(r[1:]) for r in conn.execute("PRAGMA table_info(swarm_messages)")]


def _seed_database(path: Path) -> sqlite3.Connection:
    """A database as the seed's TypeScript daemon left it: the v1 table, user_version 0."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    migrate(conn, MIGRATIONS[:1])
    conn.execute("PRAGMA user_version = 0")
    return conn


@pytest.mark.sqlite_only("journal mode and sync are a SQLite file's")
def test_database_is_wal_with_full_sync(repo: SwarmRepository) -> None:
    """The database runs in WAL mode with synchronous=FULL, so a commit is on disk."""
    conn = repo.connection
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2


def test_parent_folders_are_created(tmp_path: Path) -> None:
    """Opening a database in a folder that does not exist yet creates the folder."""
    path = tmp_path / "a" / "b" / "pigeond.db"
    open_database(path).close()
    assert path.is_file()


@pytest.mark.sqlite_only("the seed's TypeScript daemon wrote SQLite files")
def test_seed_columns_are_kept_exactly(repo: SwarmRepository) -> None:
    """The seed's 14 columns keep their names, types, NOT NULLs and defaults, in order."""
    assert _columns(repo.sqlite_connection)[:14] == SEED_COLUMNS


def test_added_columns(repo: SwarmRepository) -> None:
    """pigeond's own columns follow the seed's, in migration order."""
    added = column_names(repo)[14:]
    assert added == [
        "last_error", "accept_seq", "handoff_seq",
        "verified_at", "verify_by", "requeue_count", "expires_at",
        "handoff_agent", "handoff_provider", "handoff_model", "handoff_variant", "handoff_note",
        "handoff_intent_at", "answered_at", "answer_message_id", "from_name", "to_name",
        "channel_msg_id", "thread_id", "hold_kind", "hold_brake", "hold_reason", "hold_ttl_ms",
        "from_proof", "from_proof_note", "from_proof_call", "steer",
    ]  # fmt: skip


@pytest.mark.sqlite_only("the seed's TypeScript daemon wrote SQLite files")
def test_seed_indexes_are_kept(repo: SwarmRepository) -> None:
    """The seed's three indexes exist on the same columns."""
    for name, columns in SEED_INDEXES.items():
        info = repo.connection.execute(f"PRAGMA index_info({name})").fetchall()
        assert [r[2] for r in info] == columns


def test_schema_version_is_current(repo: SwarmRepository) -> None:
    """A new database is stamped with the newest schema version."""
    assert stored_schema_version(repo) == SCHEMA_VERSION


def test_seed_database_upgrades_in_place(tmp_path: Path) -> None:
    """A database written by the seed daemon is upgraded at start, its rows kept in order."""
    path = tmp_path / "seed.db"
    conn = _seed_database(path)
    rows = [
        ("msg_b", "ses_x", "ses_t", "handed_off", 200, 500),
        ("msg_a", "ses_x", "ses_t", "handed_off", 100, 900),
        ("msg_c", "ses_x", "ses_t", "queued", 300, None),
    ]
    for msg_id, sender, to, state, created, handed in rows:
        conn.execute(
            "INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, payload, state,"
            " next_retry_at, created_at, updated_at, handed_off_at)"
            " VALUES (?, ?, ?, 'chat', 'p', ?, ?, ?, ?, ?)",
            (msg_id, sender, to, state, created, created, created, handed),
        )
    conn.close()

    repo = SwarmRepository(open_database(path))
    assert stored_schema_version(repo) == SCHEMA_VERSION
    a, b, c = (repo.get(m) for m in ("msg_a", "msg_b", "msg_c"))
    assert a is not None and b is not None and c is not None
    assert [a.accept_seq, b.accept_seq, c.accept_seq] == [1, 2, 3]
    # msg_b was handed off first (t=500), msg_a later (t=900)
    assert [m.msg_id for m in repo.inbox_page("ses_t", 0, 10).messages] == ["msg_b", "msg_a"]
    assert c.handoff_seq is None
    assert repo.accept(new_message("ses_t", msg_id="msg_d"), NOW_MS) is AcceptOutcome.STORED
    d = repo.get("msg_d")
    assert d is not None and d.accept_seq == 4


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A database from a newer pigeond is refused with a clear error, not changed."""
    path = tmp_path / "new.db"
    open_database(path).close()
    conn = connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaError, match="newer than this pigeond"):
        open_database(path)


def test_garbage_file_is_refused(tmp_path: Path) -> None:
    """A file that is not SQLite is refused with a SchemaError."""
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(SchemaError):
        open_database(path)


def test_failed_migration_leaves_old_version(tmp_path: Path) -> None:
    """A migration that fails half-way rolls back whole: the version does not move."""
    path = tmp_path / "m.db"
    conn = connect(path)

    def broken(c: sqlite3.Connection) -> None:
        c.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        migrate(conn, [*MIGRATIONS, broken])
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "half_done" not in tables


def test_accept_stores_queued_and_due_now(repo: SwarmRepository) -> None:
    """An accepted message is queued, has no attempts, and is due at once."""
    assert repo.accept(new_message(msg_id="msg_1"), NOW_MS) is AcceptOutcome.STORED
    stored = repo.get("msg_1")
    assert stored is not None
    assert (stored.state, stored.attempts, stored.next_retry_at) == ("queued", 0, NOW_MS)
    assert (stored.created_at, stored.updated_at, stored.handed_off_at) == (NOW_MS, NOW_MS, None)


def test_accept_same_content_is_duplicate(repo: SwarmRepository) -> None:
    """The same msg_id with the same content is a duplicate and writes nothing."""
    message = new_message(msg_id="msg_1")
    repo.accept(message, NOW_MS)
    assert repo.accept(message, NOW_MS + 5000) is AcceptOutcome.DUPLICATE
    stored = repo.get("msg_1")
    assert stored is not None and stored.updated_at == NOW_MS
    assert repo.count_by_state() == {"queued": 1}


def test_accept_other_content_is_conflict(repo: SwarmRepository) -> None:
    """The same msg_id with other content is a conflict and changes nothing."""
    repo.accept(new_message(msg_id="msg_1", payload="one"), NOW_MS)
    assert repo.accept(new_message(msg_id="msg_1", payload="two"), NOW_MS) is AcceptOutcome.CONFLICT
    stored = repo.get("msg_1")
    assert stored is not None and stored.payload == "one"


def test_accept_order_is_kept_within_a_millisecond(repo: SwarmRepository) -> None:
    """Messages accepted in the same millisecond keep their accept order."""
    for msg_id in ("msg_z", "msg_a", "msg_m"):
        repo.accept(new_message(msg_id=msg_id), NOW_MS)
    order = []
    for _ in range(3):
        head = repo.queue_head("ses_target")
        assert head is not None
        order.append(head.msg_id)
        repo.mark_handed_off(head.msg_id, NOW_MS)
    assert order == ["msg_z", "msg_a", "msg_m"]


def test_queue_head_is_priority_then_fifo(repo: SwarmRepository) -> None:
    """The head is the most urgent message, oldest first within a priority."""
    for msg_id, priority in [
        ("msg_l1", "low"),
        ("msg_n1", "normal"),
        ("msg_u1", "urgent"),
        ("msg_n2", "normal"),
        ("msg_u2", "urgent"),
        ("msg_l2", "low"),
    ]:
        repo.accept(new_message(msg_id=msg_id, priority=priority), NOW_MS)
    order = []
    while (head := repo.queue_head("ses_target")) is not None:
        order.append(head.msg_id)
        repo.mark_handed_off(head.msg_id, NOW_MS)
    assert order == ["msg_u1", "msg_u2", "msg_n1", "msg_n2", "msg_l1", "msg_l2"]


def test_mark_handed_off_numbers_hand_offs(repo: SwarmRepository) -> None:
    """Each hand-off takes the next hand-off number and clears the retry time."""
    repo.accept(new_message(msg_id="msg_1"), NOW_MS)
    repo.accept(new_message(msg_id="msg_2"), NOW_MS)
    assert repo.mark_handed_off("msg_2", NOW_MS + 10)
    assert repo.mark_handed_off("msg_1", NOW_MS + 20)
    one, two = repo.get("msg_1"), repo.get("msg_2")
    assert one is not None and two is not None
    assert (two.handoff_seq, one.handoff_seq) == (1, 2)
    assert (one.state, one.handed_off_at, one.next_retry_at) == ("handed_off", NOW_MS + 20, None)


def test_mark_handed_off_only_from_queued(repo: SwarmRepository) -> None:
    """A message that is no longer queued is not handed off again."""
    repo.accept(new_message(msg_id="msg_1"), NOW_MS)
    assert repo.mark_handed_off("msg_1", NOW_MS)
    assert not repo.mark_handed_off("msg_1", NOW_MS + 1)
    assert not repo.mark_handed_off("msg_unknown", NOW_MS)


def test_failed_attempt_schedules_retry(repo: SwarmRepository) -> None:
    """A failed attempt counts, records why, and sets the next retry time."""
    repo.accept(new_message(msg_id="msg_1"), NOW_MS)
    assert repo.record_failed_attempt("msg_1", "HTTP 500", NOW_MS + 1, NOW_MS + 1001)
    stored = repo.get("msg_1")
    assert stored is not None
    assert (stored.state, stored.attempts, stored.last_error) == ("queued", 1, "HTTP 500")
    assert (stored.next_retry_at, stored.updated_at) == (NOW_MS + 1001, NOW_MS + 1)


def test_final_failed_attempt_marks_failed(repo: SwarmRepository) -> None:
    """A failed attempt with no retry time makes the message failed for good."""
    repo.accept(new_message(msg_id="msg_1"), NOW_MS)
    repo.record_failed_attempt("msg_1", "gone", NOW_MS, None)
    stored = repo.get("msg_1")
    assert stored is not None
    assert (stored.state, stored.attempts, stored.next_retry_at) == ("failed", 1, None)
    assert repo.queue_head("ses_target") is None


def test_ready_targets_only_due_direct_messages(repo: SwarmRepository) -> None:
    """Ready targets have a due queued direct message; channel and waiting ones are not."""
    repo.accept(new_message("ses_due", msg_id="msg_1"), NOW_MS)
    repo.accept(new_message("ses_later", msg_id="msg_2"), NOW_MS)
    repo.record_failed_attempt("msg_2", "x", NOW_MS, NOW_MS + 5000)
    accept_channel_alone(repo, new_message(channel="builds", msg_id="msg_3"), NOW_MS)
    repo.accept(new_message("ses_done", msg_id="msg_4"), NOW_MS)
    repo.mark_handed_off("msg_4", NOW_MS)
    assert repo.ready_targets(NOW_MS) == ["ses_due"]
    assert sorted(repo.ready_targets(NOW_MS + 5000)) == ["ses_due", "ses_later"]


def test_counts_leave_out_channel_messages(repo: SwarmRepository) -> None:
    """Channel messages wait by design and are not counted as queued."""
    accept_channel_alone(repo, new_message(channel="builds"), NOW_MS)
    repo.accept(new_message("ses_t"), NOW_MS)
    assert repo.count_by_state() == {State.QUEUED: 1}


def test_inbox_pages_in_hand_off_order(repo: SwarmRepository) -> None:
    """The inbox returns a session's hand-offs in hand-off order, paged by a cursor."""
    for i in range(5):
        repo.accept(new_message(msg_id=f"msg_{i}"), NOW_MS)
        repo.mark_handed_off(f"msg_{i}", NOW_MS + i)
    first = repo.inbox_page("ses_target", 0, 2)
    assert [m.msg_id for m in first.messages] == ["msg_0", "msg_1"] and first.has_more
    last_seq = first.messages[-1].handoff_seq
    assert last_seq is not None
    rest = repo.inbox_page("ses_target", last_seq, 10)
    assert [m.msg_id for m in rest.messages] == ["msg_2", "msg_3", "msg_4"]
    assert not rest.has_more


def test_inbox_shows_late_hand_off_of_old_message(repo: SwarmRepository) -> None:
    """An older message handed off after a reader's cursor passed is still returned next."""
    repo.accept(new_message(msg_id="msg_0001_old"), NOW_MS)
    repo.record_failed_attempt("msg_0001_old", "busy", NOW_MS, NOW_MS + 1000)
    repo.accept(new_message(msg_id="msg_0002_new"), NOW_MS + 1)
    repo.mark_handed_off("msg_0002_new", NOW_MS + 2)
    page = repo.inbox_page("ses_target", 0, 10)
    cursor = page.messages[-1].handoff_seq
    assert cursor is not None
    repo.mark_handed_off("msg_0001_old", NOW_MS + 1000)
    assert [m.msg_id for m in repo.inbox_page("ses_target", cursor, 10).messages] == [
        "msg_0001_old"
    ]


def test_inbox_is_per_session(repo: SwarmRepository) -> None:
    """A session's inbox holds only messages to that session."""
    repo.accept(new_message("ses_a", msg_id="msg_a"), NOW_MS)
    repo.accept(new_message("ses_b", msg_id="msg_b"), NOW_MS)
    repo.mark_handed_off("msg_a", NOW_MS)
    repo.mark_handed_off("msg_b", NOW_MS)
    assert [m.msg_id for m in repo.inbox_page("ses_b", 0, 10).messages] == ["msg_b"]


@pytest.mark.sqlite_only("PRAGMA query_only; PostgreSQL faults: test_postgres_faults.py")
def test_read_only_database_refuses_writes(repo: SwarmRepository) -> None:
    """On a read-only database accept raises StorageUnavailable and stores nothing."""
    repo.connection.execute("PRAGMA query_only = 1")
    with pytest.raises(StorageUnavailable):
        repo.accept(new_message(msg_id="msg_1"), NOW_MS)
    repo.connection.execute("PRAGMA query_only = 0")
    assert repo.get("msg_1") is None


@pytest.mark.sqlite_only("PRAGMA max_page_count; PostgreSQL faults: test_postgres_faults.py")
def test_full_disk_refuses_writes(repo: SwarmRepository) -> None:
    """When the database cannot grow, accept raises StorageUnavailable and stores nothing."""
    conn = repo.connection
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StorageUnavailable):
        for i in range(200):
            repo.accept(new_message(msg_id=f"msg_{i}", payload="x" * 4000), NOW_MS)
    stored = repo.count_by_state().get("queued", 0)
    assert all(repo.get(f"msg_{i}") is not None for i in range(stored))
    assert repo.get(f"msg_{stored}") is None


def test_locked_database_times_out_as_unavailable(db_path: Path) -> None:
    """A write blocked by another writer past the busy timeout is StorageUnavailable."""
    open_database(db_path).close()
    holder = connect(db_path)
    holder.execute("BEGIN IMMEDIATE")
    repo = SwarmRepository(connect(db_path, busy_timeout_ms=50))
    try:
        with pytest.raises(StorageUnavailable):
            repo.accept(new_message(msg_id="msg_1"), NOW_MS)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert repo.accept(new_message(msg_id="msg_1"), NOW_MS) is AcceptOutcome.STORED
    repo.close()


def test_committed_row_is_visible_to_a_new_connection(repo: SwarmRepository, db_path: Path) -> None:
    """After accept returns, another connection (another process) sees the row."""
    repo.accept(new_message(msg_id="msg_1"), NOW_MS)
    other = reopened(repo, db_path)
    assert other.get("msg_1") is not None
    other.close()


# -- the inbox's byte budget -----------------------------------------------------------


def _handed_off(repo: SwarmRepository, payloads: list[str]) -> list[StoredMessage]:
    """Messages to ses_target with these payloads, handed off in this order."""
    ids = [f"msg_b{i:03d}" for i in range(len(payloads))]
    for msg_id, payload in zip(ids, payloads, strict=True):
        repo.accept(new_message(msg_id=msg_id, payload=payload), NOW_MS)
    repo.mark_handed_off_many(ids, NOW_MS)
    stored = [repo.get(msg_id) for msg_id in ids]
    assert all(m is not None for m in stored)
    return [m for m in stored if m is not None]


def test_inbox_page_stops_at_the_byte_budget(repo: SwarmRepository) -> None:
    """A page takes messages while their JSON size fits max_bytes; has_more says more wait."""
    messages = _handed_off(repo, ["a" * 1000] * 5)
    size = inbox_entry_bytes(messages[0])
    page = repo.inbox_page("ses_target", 0, 100, max_bytes=3 * size - 1)
    assert [m.msg_id for m in page.messages] == [m.msg_id for m in messages[:2]]
    assert sum(inbox_entry_bytes(m) for m in page.messages) <= 3 * size - 1
    assert page.has_more


def test_inbox_page_takes_what_fits_the_budget_exactly(repo: SwarmRepository) -> None:
    """Messages whose sizes add up to exactly max_bytes all come, and nothing more waits."""
    messages = _handed_off(repo, ["a" * 1000] * 3)
    page = repo.inbox_page("ses_target", 0, 100, max_bytes=3 * inbox_entry_bytes(messages[0]))
    assert len(page.messages) == 3 and not page.has_more


def test_inbox_page_counts_json_escapes(repo: SwarmRepository) -> None:
    """The budget counts the answer's bytes: control characters count six each, not one."""
    _handed_off(repo, ["\x01" * 600] * 2)  # 1200 payload bytes, over 7200 as JSON
    page = repo.inbox_page("ses_target", 0, 100, max_bytes=4096)
    assert len(page.messages) == 1 and page.has_more


def test_oversized_message_comes_alone(repo: SwarmRepository) -> None:
    """A message larger than max_bytes is a page of its own, so a reader always progresses."""
    messages = _handed_off(repo, ["big" * 2000, "small"])
    first = repo.inbox_page("ses_target", 0, 100, max_bytes=1024)
    assert [m.msg_id for m in first.messages] == [messages[0].msg_id] and first.has_more
    cursor = first.messages[-1].handoff_seq
    assert cursor is not None
    rest = repo.inbox_page("ses_target", cursor, 100, max_bytes=1024)
    assert [m.msg_id for m in rest.messages] == [messages[1].msg_id] and not rest.has_more


def test_oversized_last_message_has_nothing_after_it(repo: SwarmRepository) -> None:
    """An oversized message alone at the end of the inbox is a page with has_more false."""
    _handed_off(repo, ["big" * 2000])
    page = repo.inbox_page("ses_target", 0, 100, max_bytes=1024)
    assert len(page.messages) == 1 and not page.has_more


def test_inbox_page_of_exactly_limit_messages_has_no_more(repo: SwarmRepository) -> None:
    """When exactly limit messages are left, the page holds them all and has_more is false."""
    _handed_off(repo, ["x"] * 3)
    page = repo.inbox_page("ses_target", 0, 3)
    assert len(page.messages) == 3 and not page.has_more


def test_byte_bounded_pages_visit_every_message_once(repo: SwarmRepository) -> None:
    """Following the last message's handoff_seq visits each message once, in hand-off order."""
    sizes = [10, 900, 3000, 10, 10, 500, 5000, 700, 10, 2000, 1, 999]
    messages = _handed_off(repo, ["p" * n for n in sizes])
    seen: list[str] = []
    cursor, has_more = 0, True
    while has_more:
        page = repo.inbox_page("ses_target", cursor, 4, max_bytes=2048)
        assert page.messages, "a page with has_more must not be empty"
        if len(page.messages) > 1:
            assert sum(inbox_entry_bytes(m) for m in page.messages) <= 2048
        seen += [m.msg_id for m in page.messages]
        last_seq = page.messages[-1].handoff_seq
        assert last_seq is not None
        cursor, has_more = last_seq, page.has_more
    assert seen == [m.msg_id for m in messages]


@pytest.mark.sqlite_only("SQLite's query plan")
def test_inbox_page_walks_the_handoff_index(repo: SwarmRepository) -> None:
    """The page's query walks idx_swarm_handoff in order: no scan, no sort of the backlog."""
    plan = [
        str(row[3])
        for row in repo.connection.execute(
            "EXPLAIN QUERY PLAN " + INBOX_PAGE_SQL, ("ses_target", 0, 101)
        )
    ]
    assert plan == [
        "SEARCH swarm_messages USING INDEX idx_swarm_handoff (to_session=? AND handoff_seq>?)"
    ]


def test_migration_6_moves_ended_notices_to_dropped(tmp_path: Path) -> None:
    """A version-5 database's failed and expired notices become 'dropped'; other failed
    messages stay failed, and the prunable index takes the new state."""
    path = tmp_path / "v5.db"
    conn = connect(path)
    migrate(conn, MIGRATIONS[:5])
    # rows as a version-5 pigeond wrote them (today's repository reads newer columns)
    for msg_id, to, kind in (
        ("msg_real", "ses_t", "chat"),
        ("msg_notice", "ses_a", "delivery.failed"),
    ):
        conn.execute(
            "INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, payload, state,"
            " created_at, updated_at, accept_seq) VALUES (?, 'ses_s', ?, ?, 'hi', 'failed', ?, ?,"
            " (SELECT COUNT(*) FROM swarm_messages))",
            (msg_id, to, kind, NOW_MS, NOW_MS),
        )
    conn.close()
    upgraded = SwarmRepository(open_database(path))
    try:
        assert upgraded.count_by_state() == {"failed": 1, "dropped": 1}
        plan = upgraded.explain_prune(NOW_MS + 1, 10)
        assert any("idx_swarm_prunable" in step for step in plan), plan
    finally:
        upgraded.close()


def test_count_open_counts_only_queued_and_failed_direct_messages(repo: SwarmRepository) -> None:
    """count_open: queued and failed direct messages; delivered, channel ones left out."""
    for i in range(3):
        repo.accept(new_message("ses_t", msg_id=f"msg_{i}"), NOW_MS)
    accept_channel_alone(repo, new_message(channel="general", msg_id="msg_chan"), NOW_MS)
    assert repo.mark_handed_off("msg_0", NOW_MS)
    assert repo.fail_now(["msg_1"], "gone", NOW_MS) == ["msg_1"]  # queues its sender a notice
    assert repo.count_open() == {"queued": 2, "failed": 1}
    assert repo.count_by_state() == {"queued": 2, "failed": 1, "handed_off": 1}


@given(
    payload=st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=300),
    sender=st.text(alphabet=st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=40),
    stamp=st.integers(min_value=0, max_value=2**63 - 1),
)
def test_an_inbox_entry_never_encodes_larger_than_its_bound(
    payload: str, sender: str, stamp: int
) -> None:
    """inbox_entry_bytes_at_most bounds the exact size, for any text and any time."""
    message = StoredMessage(
        msg_id="msg_x", from_session=sender, to_session="ses_t", channel=None, kind="chat",
        priority="normal", reply_to=None, payload=payload, state="handed_off", attempts=0,
        next_retry_at=None, created_at=stamp, updated_at=stamp, handed_off_at=stamp,
        last_error=None, accept_seq=1, handoff_seq=1, verified_at=None, verify_by=None,
        requeue_count=0, expires_at=None,
    )  # fmt: skip
    assert inbox_entry_bytes(message) <= inbox_entry_bytes_at_most(message)
