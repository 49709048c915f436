"""Each thread's costs where threads are listed: ``pigeon threads`` (table and ``--json``)
and ``GET /swarm/threads`` (pigeond/storage/thread_costs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from pigeond.cli.pigeon import main
from pigeond.config import Config
from pigeond.costs import EndedTurn, TurnUsage
from pigeond.storage import SwarmRepository, open_database
from tests.fixed_time import NOW_MS
from tests.http_helpers import daemon_call
from tests.storage_helpers import clock_daemon, repo_of, seen_message

USAGE = TurnUsage(input=50_000, output=2_310, cost=0.25)


def record(repo: SwarmRepository, at: int) -> None:
    """thr_paid caused one turn of 52,310 tokens and $0.25; thr_free caused none."""
    seen_message(repo, "msg_paid", at, thread="thr_paid")
    seen_message(repo, "msg_free", at - 1, thread="thr_free")
    repo.record_turns("ses_target", [EndedTurn("u1", ("msg_paid",), USAGE)], at)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "pigeond.db"
    repo = SwarmRepository(open_database(path))
    record(repo, NOW_MS)
    repo.close()
    return path


def test_pigeon_threads_shows_tokens_and_cost(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """The tokens grouped by thousands, the cost in dollars; zeros for a thread without turns."""
    assert main(["threads", "--db", str(db)], env={}, now_ms=NOW_MS + 60_000) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["thr_paid"][6:8] == ["52,310", "$0.2500"]
    assert rows["thr_free"][6:8] == ["0", "$0.0000"]


def test_pigeon_threads_json_has_the_costs(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """--json: each thread's ``costs`` object, as GET /swarm/costs gives it."""
    assert main(["threads", "--json", "--db", str(db)], env={}, now_ms=NOW_MS) == 0
    costs = {t["thread"]: t["costs"] for t in json.loads(capsys.readouterr().out)}
    assert (costs["thr_paid"]["turns"], costs["thr_paid"]["tokens"]) == (1, 52_310)
    assert costs["thr_free"]["turns"] == 0


def test_get_threads_has_the_costs(tmp_path: Path, clock: Clock) -> None:
    """GET /swarm/threads: the same ``costs`` object on each thread."""
    daemon = clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)
    record(repo_of(daemon), int(clock.seconds() * 1000))
    status, body = daemon_call(daemon, "GET", "/swarm/threads")
    assert status == 200
    costs = {t["thread"]: t["costs"] for t in body["threads"]}
    assert costs["thr_paid"]["cost"] == 0.25 and costs["thr_free"]["tokens"] == 0
