"""The channel queries of docs/storage.md, run with sqlite3 on a database pigeond made (the
curl commands of docs/http-api.md's channels section run against a real daemon in
tests/test_docs_snippets.py)."""

from __future__ import annotations

from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.operator_sql import OperatorDb, rows, run_sql_command, utc

TEAM = "team.backend"


def _team_with_a_message(db: OperatorDb) -> None:
    """ses_a (named reviewer) and ses_b join team.backend; ses_c sends it one message."""
    repo = SwarmRepository(open_database(db.path))
    try:
        repo.claim_name("reviewer", "ses_a", db.hour_ago_ms)
        repo.join_channel(TEAM, "ses_a", db.hour_ago_ms, 32)
        repo.join_channel(TEAM, "ses_b", db.hour_ago_ms + 1000, 32)
        message = new_message(channel=TEAM, msg_id="msg_team1", sender="ses_c")
        repo.accept_many([Accept(message, db.hour_ago_ms + 2000)])
        [first, _] = repo.fan_out_of("msg_team1").deliveries
        repo.mark_handed_off_many([first.msg_id], db.hour_ago_ms + 3000)
    finally:
        repo.close()


def test_channel_members_query_lists_each_member_with_its_name(
    operator_db: OperatorDb, sqlite_path: str
) -> None:
    """The members query shows both members in join order, ses_a with its name."""
    _team_with_a_message(operator_db)
    output = run_sql_command(operator_db, sqlite_path, "FROM swarm_channel_members c").stdout
    first, second = rows(output)
    assert first.split()[:3] == [TEAM, "ses_a", "reviewer"]
    assert second.split()[:2] == [TEAM, "ses_b"]
    assert utc(operator_db.hour_ago_ms) in first


def test_channel_copies_query_shows_each_member_s_copy_and_state(
    operator_db: OperatorDb, sqlite_path: str
) -> None:
    """The copies query shows the channel message once per member, each copy's state."""
    _team_with_a_message(operator_db)
    output = run_sql_command(operator_db, sqlite_path, "d.channel_msg_id = p.msg_id").stdout
    first, second = rows(output)
    assert first.split()[:4] == [TEAM, "msg_team1", "ses_a", "handed_off"]
    assert second.split()[:4] == [TEAM, "msg_team1", "ses_b", "queued"]
    assert utc(operator_db.hour_ago_ms + 3000) in first
