"""Full-text search in storage: what a search finds, that the index follows every write
(triggers), that user text is searched literally, and that the query uses the index."""

from __future__ import annotations

from pathlib import Path

import pytest

from pigeond.model import StoredMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.engines import sqlite as sqlite_engine
from pigeond.storage.migrations import INDEX_PENDING_SQL, MIGRATIONS
from pigeond.storage.repository import Accept
from pigeond.storage.schema import connect, migrate
from pigeond.storage.search import (
    MAX_QUERY_CHARS,
    MAX_QUERY_WORDS,
    SEARCH_SQL,
    SearchQueryError,
    match_expression,
)
from testkit.messages import new_message
from tests.fixed_time import NOW_MS
from tests.hostile_text import HOSTILE_SEARCHES
from tests.storage_helpers import accept_channel_alone, search_index_in_step

pytestmark = pytest.mark.both_backends


def ids(found: list[StoredMessage]) -> list[str]:
    return [m.msg_id for m in found]


def test_finds_by_every_word_newest_first(repo: SwarmRepository) -> None:
    """Every word must be there, in any field order; the newest message comes first."""
    repo.accept(new_message(msg_id="msg_1", payload="deploy the alpha build"), NOW_MS)
    repo.accept(new_message(msg_id="msg_2", payload="alpha build failed"), NOW_MS + 1)
    repo.accept(new_message(msg_id="msg_3", payload="beta build"), NOW_MS + 2)
    assert ids(repo.search("build alpha")) == ["msg_2", "msg_1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("kickoff", "msg_p"),  # payload
        ("clarification", "msg_k"),  # kind (clarification.request)
        ("ses_writer", "msg_f"),  # sender
        ("ses_reader", "msg_t"),  # target
        ("ops", "msg_c"),  # channel
        ("reviewer", "msg_n"),  # the name the send was addressed to
    ],
)
def test_finds_by_each_indexed_field(repo: SwarmRepository, text: str, expected: str) -> None:
    """Payload, kind, sender, target, channel and names are all searched."""
    repo.accept(new_message(msg_id="msg_p", payload="kickoff"), NOW_MS)
    repo.accept(new_message(msg_id="msg_k", kind="clarification.request"), NOW_MS)
    repo.accept(new_message(msg_id="msg_f", sender="ses_writer"), NOW_MS)
    repo.accept(new_message("ses_reader", msg_id="msg_t"), NOW_MS)
    accept_channel_alone(repo, new_message(msg_id="msg_c", channel="ops"), NOW_MS)
    repo.accept_many([Accept(new_message("ses_x", msg_id="msg_n"), NOW_MS, to_name="reviewer")])
    assert ids(repo.search(text)) == [expected]


def test_a_session_finds_only_what_it_sent_or_received(repo: SwarmRepository) -> None:
    """ses_a finds its sent and received messages, not ses_b's nor ses_a_b's (whose id
    FTS5 splits into words that contain ses_a's)."""
    repo.accept(new_message("ses_a", msg_id="msg_to_a", sender="ses_b", payload="secret"), NOW_MS)
    repo.accept(new_message("ses_b", msg_id="msg_from_a", sender="ses_a", payload="secret"), NOW_MS)
    repo.accept(new_message("ses_c", msg_id="msg_other", sender="ses_b", payload="secret"), NOW_MS)
    repo.accept(new_message("ses_a_b", msg_id="msg_near", payload="secret"), NOW_MS)
    assert sorted(ids(repo.search("secret", session="ses_a"))) == ["msg_from_a", "msg_to_a"]


def test_state_narrows_a_search(repo: SwarmRepository) -> None:
    """With a state, only messages now in that state are found."""
    repo.accept(new_message(msg_id="msg_q", payload="word"), NOW_MS)
    repo.accept(new_message(msg_id="msg_h", payload="word"), NOW_MS)
    repo.mark_handed_off("msg_h", NOW_MS + 1)
    assert ids(repo.search("word", state="handed_off")) == ["msg_h"]


def test_the_index_follows_inserts(repo: SwarmRepository) -> None:
    """An accepted message is found at once, and the index matches the table."""
    repo.accept(new_message(msg_id="msg_1", payload="fresh"), NOW_MS)
    assert ids(repo.search("fresh")) == ["msg_1"]
    assert search_index_in_step(repo.connection)


def test_a_state_change_keeps_the_message_found(repo: SwarmRepository) -> None:
    """A hand-off and a cancel change no indexed field: still found, with its new state."""
    repo.accept(new_message(msg_id="msg_1", payload="moving"), NOW_MS)
    repo.mark_handed_off("msg_1", NOW_MS + 1)
    [found] = repo.search("moving")
    assert found.state == "handed_off"
    assert search_index_in_step(repo.connection)


def test_pruning_takes_messages_out_of_the_index(repo: SwarmRepository) -> None:
    """A pruned message is no longer found, and the index still matches the table."""
    repo.accept(new_message(msg_id="msg_old", payload="ancient"), NOW_MS)
    repo.accept(new_message(msg_id="msg_new", payload="ancient"), NOW_MS)
    repo.cancel("msg_old", NOW_MS + 1)
    pruned = repo.prune_batch(NOW_MS + 2, 100)
    assert sum(pruned.values()) == 1
    assert ids(repo.search("ancient")) == ["msg_new"]
    assert search_index_in_step(repo.connection)


def test_an_operator_s_delete_and_edit_by_hand_keep_the_index_in_step(
    repo: SwarmRepository,
) -> None:
    """sqlite3 by hand: a DELETE and an UPDATE of the payload are followed by the triggers."""
    repo.accept(new_message(msg_id="msg_del", payload="gone"), NOW_MS)
    repo.accept(new_message(msg_id="msg_edit", payload="before"), NOW_MS)
    conn = repo.connection
    conn.execute("DELETE FROM swarm_messages WHERE msg_id = 'msg_del'")
    conn.execute("UPDATE swarm_messages SET payload = 'after' WHERE msg_id = 'msg_edit'")
    assert repo.search("gone") == [] and repo.search("before") == []
    assert ids(repo.search("after")) == ["msg_edit"]
    assert search_index_in_step(conn)


def test_the_migration_indexes_the_rows_already_there(tmp_path: Path) -> None:
    """Messages stored before migration 13 are found after it."""
    conn = connect(tmp_path / "old.db")
    migrate(conn, MIGRATIONS[:12])
    conn.execute(
        "INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, payload, state,"
        " created_at, updated_at, accept_seq) VALUES"
        " ('msg_old', 'ses_s', 'ses_t', 'chat', 'legacy words', 'handed_off', 1, 1, 7)"
    )
    assert migrate(conn) == len(MIGRATIONS)
    assert ids(SwarmRepository(conn).search("legacy")) == ["msg_old"]
    assert search_index_in_step(conn)


@pytest.mark.parametrize("text", HOSTILE_SEARCHES)
def test_hostile_text_is_refused_or_searched_literally(repo: SwarmRepository, text: str) -> None:
    """FTS5 syntax in the text is never parsed: a SearchQueryError or a plain search."""
    repo.accept(new_message(msg_id="msg_1", payload="alpha beta chat"), NOW_MS)
    try:
        found = repo.search(text, session="ses_target")
    except SearchQueryError as e:
        assert str(e).startswith("the search text")
    else:
        assert all(m.payload == "alpha beta chat" for m in found)


def test_syntax_is_searched_as_the_words_it_holds(repo: SwarmRepository) -> None:
    """``kind:chat`` is not a column filter but the words kind and chat, side by side."""
    repo.accept(new_message(msg_id="msg_plain", payload="just chat"), NOW_MS)
    repo.accept(new_message(msg_id="msg_lit", payload="set kind:chat please"), NOW_MS)
    assert ids(repo.search("kind:chat")) == ["msg_lit"]
    assert ids(repo.search("NEAR(please")) == []


@pytest.mark.parametrize(
    "text", ["", "   ", "*", "-- ()", "a" * (MAX_QUERY_CHARS + 1), "w " * (MAX_QUERY_WORDS + 1)]
)
def test_text_without_a_word_or_too_long_is_refused(text: str) -> None:
    """Nothing to search for, or more than the bounds: a SearchQueryError naming why."""
    with pytest.raises(SearchQueryError):
        match_expression(text)


def test_every_word_is_one_quoted_phrase() -> None:
    """Quotes are doubled inside a phrase, so no text can end one early."""
    assert match_expression('say "hi" *') == '"say" AND """hi"""'


@pytest.mark.sqlite_only("SQLite's query plan")
def test_the_search_walks_the_index_and_joins_by_accept_sequence(repo: SwarmRepository) -> None:
    """The plan: the FTS5 index (MATCH) newest first, each row found by idx_swarm_accept_seq;
    no scan of swarm_messages and no sort."""
    params = {"match": match_expression("x", "ses_a"), "state": None, "session": "ses_a",
              "limit": 50, "offset": 0}  # fmt: skip
    plan = [str(r[3]) for r in repo.connection.execute("EXPLAIN QUERY PLAN " + SEARCH_SQL, params)]
    assert any(s.startswith("SCAN swarm_search VIRTUAL TABLE INDEX") and ":M" in s for s in plan)
    assert any("USING INDEX idx_swarm_accept_seq (accept_seq=?)" in s for s in plan), plan
    assert not any("TEMP B-TREE" in s or s == "SCAN m" for s in plan), plan


@pytest.mark.sqlite_only("FTS5's query parser")
def test_an_fts5_refusal_is_a_query_error(
    repo: SwarmRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were FTS5 to refuse an expression anyway, the caller hears a SearchQueryError."""
    monkeypatch.setattr(sqlite_engine, "match_expression", lambda text, session: "NEAR(")
    with pytest.raises(SearchQueryError, match="fts5"):
        repo.search("anything")


@pytest.mark.sqlite_only("FTS5's pending table; PostgreSQL's search column is generated")
def test_a_committed_write_leaves_nothing_to_index(repo: SwarmRepository) -> None:
    """The accepts of a group are indexed in their own transaction: nothing waits after."""
    repo.accept_many([Accept(new_message(payload=f"group {n}"), NOW_MS) for n in range(5)])
    pending = repo.connection.execute("SELECT COUNT(*) FROM swarm_search_pending").fetchone()
    assert pending == (0,) and len(repo.search("group")) == 5


@pytest.mark.sqlite_only("FTS5's pending table; PostgreSQL's search column is generated")
def test_a_row_inserted_by_hand_is_indexed_at_pigeond_s_next_write(repo: SwarmRepository) -> None:
    """sqlite3 by hand: the insert waits in swarm_search_pending, the next accept indexes it."""
    repo.connection.execute(
        "INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, payload, state,"
        " created_at, updated_at, accept_seq) VALUES"
        " ('msg_hand', 'ses_s', 'ses_t', 'chat', 'handmade', 'queued', 1, 1, 99)"
    )
    assert repo.search("handmade") == []
    repo.accept(new_message(msg_id="msg_next"), NOW_MS)
    assert ids(repo.search("handmade")) == ["msg_hand"]
    assert search_index_in_step(repo.connection)


@pytest.mark.sqlite_only("FTS5's pending table; PostgreSQL's search column is generated")
def test_a_row_deleted_before_it_was_indexed_leaves_the_index_whole(
    repo: SwarmRepository,
) -> None:
    """A pending row deleted by hand is forgotten, never deleted from the index it is not in."""
    conn = repo.connection
    conn.execute(
        "INSERT INTO swarm_messages (msg_id, from_session, to_session, kind, payload, state,"
        " created_at, updated_at, accept_seq) VALUES"
        " ('msg_hand', 'ses_s', 'ses_t', 'chat', 'brief', 'queued', 1, 1, 99)"
    )
    conn.execute("DELETE FROM swarm_messages WHERE msg_id = 'msg_hand'")
    assert conn.execute("SELECT COUNT(*) FROM swarm_search_pending").fetchone() == (0,)
    assert search_index_in_step(conn)


@pytest.mark.sqlite_only("SQLite's query plan")
def test_indexing_the_noted_rows_reads_only_those_rows(repo: SwarmRepository) -> None:
    """The pre-COMMIT step walks swarm_search_pending and finds each message by its accept
    sequence: never a walk of swarm_messages, whose size would then be every write's cost."""
    plan = [str(r[3]) for r in repo.connection.execute("EXPLAIN QUERY PLAN " + INDEX_PENDING_SQL)]
    assert plan[0].startswith("SCAN p"), plan
    assert any("USING INDEX idx_swarm_accept_seq (accept_seq=?)" in s for s in plan), plan


UNSEARCHABLE = {
    "nul": "a\x00b",
    "lone-low-surrogate": "a\udc80b",
    "lone-high-surrogate": "a\ud800b",
}


@pytest.mark.parametrize("text", UNSEARCHABLE.values(), ids=UNSEARCHABLE.keys())
@pytest.mark.parametrize("where", ["text", "session", "state"])
def test_a_character_no_engine_takes_is_a_query_error(
    repo: SwarmRepository, text: str, where: str
) -> None:
    """A NUL or a lone surrogate, in the text, the session or the state: SearchQueryError
    naming the character, never the engine's own failure."""
    session, state = (text if where == "session" else None), (text if where == "state" else None)
    with pytest.raises(SearchQueryError, match=r"cannot be searched for \(U\+"):
        repo.search(text if where == "text" else "ab", session=session, state=state)
