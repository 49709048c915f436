"""``GET /swarm/costs`` through the daemon: the sums of recorded turns per session and per
thread, and every bad query a 400 naming the parameter."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.costs import EndedTurn, TurnUsage
from pigeond.service.daemon import Daemon
from tests.fixed_time import now_ms
from tests.http_helpers import daemon_call
from tests.storage_helpers import clock_daemon, repo_of, seen_message

USAGE = TurnUsage(input=100, output=20, reasoning=0, cache_read=30, cache_write=0, cost=0.5)


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Daemon:
    """Delivery off; ses_busy ran two turns (one of unknown cost), ses_idle one; thr_a's
    messages caused ses_idle's turn and ses_busy's first, thr_b's ses_busy's second."""
    made = clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)
    repo, at = repo_of(made), now_ms(clock)
    for msg_id, to in (("msg_1", "ses_busy"), ("msg_2", "ses_busy"), ("msg_3", "ses_idle")):
        seen_message(repo, msg_id, at, to=to, thread="thr_a" if msg_id != "msg_2" else "thr_b")
    repo.record_turns("ses_idle", [EndedTurn("u1", ("msg_3",), USAGE)], at)
    unknown = TurnUsage(input=10, output=5, cost=None)
    repo.record_turns(
        "ses_busy",
        [EndedTurn("u1", ("msg_1",), USAGE), EndedTurn("u2", ("msg_2",), unknown)],
        at + 1,
    )
    return made


def costs(daemon: Daemon, **params: str) -> tuple[int, Any]:
    return daemon_call(daemon, "GET", "/swarm/costs?" + urlencode(params))


def test_sessions_are_summed_newest_turn_first(daemon: Daemon) -> None:
    """Each session's turns, tokens by kind, the known cost and the turns of unknown cost."""
    status, body = costs(daemon)
    assert status == 200
    assert [s["session"] for s in body["sessions"]] == ["ses_busy", "ses_idle"]
    assert body["sessions"][0] == {
        "session": "ses_busy", "turns": 2, "tokens": 165, "input_tokens": 110,
        "output_tokens": 25, "reasoning_tokens": 0, "cache_read_tokens": 30,
        "cache_write_tokens": 0, "cost": 0.5, "cost_unknown_turns": 1,
    }  # fmt: skip


def test_one_session_is_asked_for_by_name(daemon: Daemon) -> None:
    """``session=``: that session alone, with zeros when it ran no turn."""
    _, body = costs(daemon, session="ses_idle")
    assert [(s["session"], s["turns"]) for s in body["sessions"]] == [("ses_idle", 1)]
    _, body = costs(daemon, session="ses_none")
    assert body == {"threads": [], "sessions": [{"session": "ses_none", **ZEROS}]}


def test_limit_bounds_the_list(daemon: Daemon) -> None:
    """``limit=1``: the session with the newest turn only."""
    _, body = costs(daemon, limit="1")
    assert [s["session"] for s in body["sessions"]] == ["ses_busy"]


ZEROS = {
    "turns": 0, "tokens": 0, "input_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0,
    "cache_read_tokens": 0, "cache_write_tokens": 0, "cost": 0.0, "cost_unknown_turns": 0,
}  # fmt: skip


def test_threads_are_summed_latest_first(daemon: Daemon) -> None:
    """Without parameters, the latest threads too: each with the turns its messages caused."""
    _, body = costs(daemon)
    assert [(t["thread"], t["turns"], t["tokens"]) for t in body["threads"]] == [
        ("thr_a", 2, 300),
        ("thr_b", 1, 15),
    ]


def test_one_thread_is_asked_for_with_where_its_turns_ran(daemon: Daemon) -> None:
    """``thread=``: that thread's sums, and its turns per session."""
    _, body = costs(daemon, thread="thr_a")
    assert [(t["thread"], t["turns"]) for t in body["threads"]] == [("thr_a", 2)]
    assert [(s["session"], s["turns"]) for s in body["sessions"]] == [
        ("ses_busy", 1),
        ("ses_idle", 1),
    ]


def test_a_thread_without_turns_shows_zeros(daemon: Daemon) -> None:
    """A thread nothing was recorded for (new, or unknown): zeros, not a 404."""
    _, body = costs(daemon, thread="thr_quiet")
    assert body == {"threads": [{"thread": "thr_quiet", **ZEROS}], "sessions": []}


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"session": "not a session"}, "query parameter 'session' must match"),
        ({"thread": "-leading-dash"}, "query parameter 'thread' must match"),
        ({"thread": "t" * 65}, "query parameter 'thread' must match"),
        ({"thread": "thr_a", "session": "ses_busy"}, "at most one of"),
        ({"limit": "0"}, "query parameter 'limit' must be an integer"),
        ({"limit": "1001"}, "query parameter 'limit' must be an integer"),
    ],
)
def test_a_bad_query_is_a_400_naming_it(daemon: Daemon, params: dict[str, str], error: str) -> None:
    """Never a 500: each refusal says which parameter, and why."""
    status, body = costs(daemon, **params)
    assert status == 400 and error in body["error"]
