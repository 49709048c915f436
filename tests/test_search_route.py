"""``GET /swarm/search`` through the daemon: a session's own messages, the inbox's fields,
bounded pages, and every bad query a 400 (never a 500)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from twisted.internet.task import Clock
from twisted.logger import LogLevel

from pigeond.config import Config
from pigeond.service.daemon import Daemon
from pigeond.storage.search import MAX_SEARCH_LIMIT
from testkit.messages import new_message
from tests.fixed_time import now_ms
from tests.hostile_text import HOSTILE_SEARCHES
from tests.http_helpers import daemon_call
from tests.storage_helpers import clock_daemon, repo_of

pytestmark = pytest.mark.both_backends

ME, PEER, OTHER = "ses_me", "ses_peer", "ses_other"


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Daemon:
    """Delivery off; ses_me sent one message and received one, ses_other got another."""
    config = Config(db=str(tmp_path / "p.db"), opencode_url="", inbox_max_bytes=4096)
    made = clock_daemon(config, clock)
    repo, at = repo_of(made), now_ms(clock)
    repo.accept(new_message(PEER, msg_id="msg_sent", sender=ME, payload="build green"), at)
    repo.accept(new_message(ME, msg_id="msg_got", sender=PEER, payload="build red"), at + 1)
    repo.accept(new_message(OTHER, msg_id="msg_theirs", sender=PEER, payload="build"), at + 2)
    return made


def search(daemon: Daemon, **params: str) -> tuple[int, Any]:
    return daemon_call(daemon, "GET", "/swarm/search?" + urlencode(params))


def found_ids(body: Any) -> list[str]:
    return [m["msg_id"] for m in body["messages"]]


def test_a_session_finds_what_it_sent_and_received_newest_first(daemon: Daemon) -> None:
    """Only ses_me's two messages, newest first; ses_other's is not shown to it."""
    status, body = search(daemon, q="build", session=ME)
    assert status == 200
    assert found_ids(body) == ["msg_got", "msg_sent"] and body["has_more"] is False


def test_messages_carry_the_inbox_fields(daemon: Daemon) -> None:
    """Each message is the inbox's view of it, field for field."""
    _, body = search(daemon, q="red", session=ME)
    stored = repo_of(daemon).get("msg_got")
    assert stored is not None and body["messages"] == [stored.inbox_view()]


def test_limit_bounds_the_page(daemon: Daemon) -> None:
    """limit=1: the newest only, and has_more says another matched."""
    _, body = search(daemon, q="build", session=ME, limit="1")
    assert found_ids(body) == ["msg_got"] and body["has_more"] is True


def test_the_byte_budget_bounds_the_page(daemon: Daemon, clock: Clock) -> None:
    """Past inbox_max_bytes (4 KiB here) the page ends, the first message always comes."""
    repo = repo_of(daemon)
    for n in range(3):
        big = new_message(ME, msg_id=f"msg_big{n}", payload="huge " + "x" * 3000)
        repo.accept(big, now_ms(clock) + 10 + n)
    _, body = search(daemon, q="huge", session=ME)
    assert found_ids(body) == ["msg_big2"] and body["has_more"] is True


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"session": ME}, "query parameter 'q' is required"),
        ({"q": "build"}, "query parameter 'session' is required"),
        ({"q": "build", "session": "me"}, "query parameter 'session' must match"),
        ({"q": "*", "session": ME}, "query parameter 'q': the search text has no word"),
        ({"q": "b", "session": ME, "limit": "0"}, "query parameter 'limit' must be"),
        ({"q": "b", "session": ME, "limit": str(MAX_SEARCH_LIMIT + 1)}, "query parameter 'limit'"),
        ({"q": "b", "session": ME, "limit": "9" * 5000}, "query parameter 'limit' must be"),
    ],
)
def test_bad_parameters_are_a_400(daemon: Daemon, params: dict[str, str], error: str) -> None:
    """Missing, malformed or out-of-bounds parameters: a 400 naming the parameter."""
    status, body = search(daemon, **params)
    assert status == 400 and body["error"].startswith(error)


@pytest.mark.parametrize("text", HOSTILE_SEARCHES)
def test_hostile_queries_are_a_400_or_a_literal_search(daemon: Daemon, text: str) -> None:
    """FTS5 syntax, quotes and injections: 400 or 200, never a 500."""
    status, _ = search(daemon, q=text, session=ME)
    assert status in (200, 400)


def test_search_needs_the_token(daemon: Daemon) -> None:
    """Like every route but /health, it is refused without the token."""
    status, _ = daemon_call(daemon, "GET", f"/swarm/search?q=build&session={ME}", token=False)
    assert status == 401


@pytest.mark.parametrize(
    "raw", ["a%00b", "%00alpha", "a%ED%B2%80b"], ids=["nul", "lead-nul", "surrogate-utf8"]
)
def test_text_the_engine_refuses_is_a_400_naming_q_and_logs_nothing(
    daemon: Daemon, raw: str, log_events: list[tuple[LogLevel, str]]
) -> None:
    """A NUL (or bytes that are not UTF-8) in q: 400 naming 'q', and no error log line."""
    status, body = daemon_call(daemon, "GET", f"/swarm/search?q={raw}&session={ME}")
    assert status == 400 and body["error"].startswith("query parameter 'q'")
    assert [text for level, text in log_events if level >= LogLevel.warn] == []
