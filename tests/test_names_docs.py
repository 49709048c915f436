"""The names query of docs/storage.md, run with sqlite3 on a database pigeond made (the
`pigeon name` and curl commands of the docs run against a real daemon in
tests/test_docs_snippets.py)."""

from __future__ import annotations

from pigeond.storage import SwarmRepository, open_database
from tests.operator_sql import OperatorDb, rows, run_sql_command, utc


def test_who_holds_which_name_query_lists_each_name(
    operator_db: OperatorDb, sqlite_path: str
) -> None:
    """The names query shows each name with its session, since and last seen."""
    repo = SwarmRepository(open_database(operator_db.path))
    try:
        repo.claim_name("reviewer", "ses_b", operator_db.hour_ago_ms)
    finally:
        repo.close()
    output = run_sql_command(operator_db, sqlite_path, "FROM swarm_names").stdout
    [row] = rows(output)
    assert row.split()[:2] == ["reviewer", "ses_b"]
    assert row.count(utc(operator_db.hour_ago_ms)) == 2
