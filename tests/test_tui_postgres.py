"""``pigeon-tui`` on a PostgreSQL database: it opens, lists and writes as on SQLite, its
header names the URL without the password, and it refuses a server out of reach."""

from __future__ import annotations

import asyncio

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable

from pigeond.storage import SwarmRepository
from pigeond.storage.postgres import open_postgres, redacted
from pigeond_tui.app import PigeonApp, main
from testkit.messages import new_message
from tests.ports import closed_port
from tests.test_cli_postgres import SECRET, with_password
from tests.tui_support import HOUR, LATER, NOW, Script, highlight, settle, table_keys


@pytest.fixture
def pg_db(pg_url: str) -> str:
    """Two queued messages to ses_a and a failed one to ses_b, as tui_support.seed has them."""
    repo = SwarmRepository(open_postgres(pg_url))
    repo.accept(new_message("ses_a", msg_id="msg_q1", payload="alpha <b>"), NOW, NOW + HOUR)
    repo.accept(new_message("ses_a", msg_id="msg_q2", kind="status.update"), NOW + 1, NOW + HOUR)
    repo.accept(new_message("ses_b", msg_id="msg_f", sender="cron"), NOW + 2, NOW + HOUR)
    repo.record_failed_attempt("msg_f", "HTTP 500: boom", NOW + 3, None)
    repo.close()
    return pg_url


def drive_url(url: str, script: Script) -> PigeonApp:
    """Run the app headless on ``url`` (no timer refresh) and play ``script``."""
    app = PigeonApp(url, clock=lambda: LATER, interval=3600)

    async def run() -> None:
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(app, pilot)
            await script(app, pilot)

    asyncio.run(run())
    return app


def state_of(url: str, msg_id: str) -> str:
    repo = SwarmRepository(open_postgres(url))
    try:
        message = repo.get(msg_id)
        assert message is not None
        return message.state
    finally:
        repo.close()


def test_the_tui_lists_a_postgresql_database_and_hides_the_password(pg_db: str) -> None:
    """The queued messages and the per-target panels show; the header is the URL with
    ``***`` for its password."""
    url = with_password(pg_db)

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        assert app.sub_title == redacted(url)
        assert app.snapshot is not None
        assert app.snapshot.direct == {"queued": 2, "failed": 1}
        assert table_keys(app, "#messages") == ["msg_q2", "msg_q1"]
        assert table_keys(app, "#queued") == ["ses_a"]
        failed = app.query_one("#failed", DataTable).get_row_at(0)
        assert [str(c) for c in failed] == ["ses_b", "1", "HTTP 500: boom"]
        app.show_health("opencode speaks another API")
        assert app.sub_title == f"{redacted(url)} · opencode speaks another API"

    app = drive_url(url, script)
    assert "pigeond_test:***@" in redacted(url)
    assert SECRET not in app.sub_title and not any(SECRET in r for r in app.reports)


def test_the_tui_cancels_a_row_in_a_postgresql_database(pg_db: str) -> None:
    """`x` then Yes cancels the highlighted queued row there, as on SQLite."""

    async def script(app: PigeonApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "msg_q1")
        await pilot.press("x")
        await pilot.pause()
        await pilot.click("#yes")
        await settle(app, pilot)
        assert app.reports[-1] == "msg_q1 cancelled"
        assert table_keys(app, "#messages") == ["msg_q2"]

    drive_url(pg_db, script)
    assert state_of(pg_db, "msg_q1") == "cancelled" and state_of(pg_db, "msg_q2") == "queued"


@pytest.mark.parametrize("kind", ["unreachable", "not_pigeond"])
def test_an_unusable_postgresql_database_exits_2_with_one_line(
    pg_url: str, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server nobody answers at, or a database without pigeond's tables: exit 2 before
    the screen opens, one line, no password."""
    if kind == "unreachable":
        url = f"postgresql://u:{SECRET}@127.0.0.1:{closed_port()}/db"
    else:
        url = with_password(pg_url)
    assert main([], env={"PIGEOND_DB": url}) == 2  # a password: never on a command line
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith("pigeon-tui: ")
    assert SECRET not in err and ":***@" in err
