"""GET /metrics: Prometheus' text format, behind the token, with delivery's counters and
the queue's gauges, on a daemon wired as the entry point wires it (on a fake clock)."""

from __future__ import annotations

import re
from pathlib import Path

from twisted.internet.task import Clock
from twisted.web.http_headers import Headers

from pigeond.config import Config
from pigeond.model import Hold
from pigeond.service.daemon import Daemon
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import now_ms
from tests.http_helpers import API, client_headers, result_of, stub_client
from tests.opencode_stub import RecordingOpencode
from tests.storage_helpers import clock_daemon, repo_of


def scrape(daemon: Daemon, *, with_token: bool = True) -> tuple[int, str, str]:
    """GET /metrics (with the daemon's token unless told not to): the status, the content
    type and the text."""
    headers = client_headers(daemon) if with_token else Headers()
    response = result_of(stub_client(daemon.site.resource).get(API + "/metrics", headers=headers))
    content_type = (response.headers.getRawHeaders("content-type") or [""])[0]
    return int(response.code), content_type, result_of(response.text())


def sample(text: str, name: str) -> float:
    """The value of one sample line (``name`` with its labels, as exposed)."""
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"{name} not in:\n{text}"
    return float(match.group(1))


def test_metrics_need_the_token(tmp_path: Path, clock: Clock) -> None:
    """Without the bearer token /metrics is a 401, like every route but /health."""
    daemon = clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)
    assert scrape(daemon, with_token=False)[0] == 401


def test_messages_by_state_and_the_oldest_queued_age(tmp_path: Path, clock: Clock) -> None:
    """Gauges count direct messages by state and age the oldest queued one by the clock."""
    daemon = clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)
    repo_of(daemon).accept(new_message("ses_t"), now_ms(clock))
    clock.advance(30)
    status, content_type, text = scrape(daemon)
    assert status == 200 and content_type.startswith("text/plain")
    assert sample(text, 'pigeond_messages{state="queued"}') == 1
    assert sample(text, 'pigeond_messages{state="failed"}') == 0
    assert sample(text, "pigeond_oldest_queued_age_seconds") == 30
    assert sample(text, "pigeond_event_stream_connected") == 0


def test_messages_held_for_a_person_are_counted(tmp_path: Path, clock: Clock) -> None:
    """pigeond_held_for_a_person: what a brake holds (not what consent holds)."""
    daemon = clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)
    hold = Hold("hops", "too many")
    repo_of(daemon).accept_many([Accept(new_message("ses_t"), now_ms(clock), brake_hold=hold)])
    repo_of(daemon).accept(new_message("ses_t"), now_ms(clock))
    assert sample(scrape(daemon)[2], "pigeond_held_for_a_person") == 1


def test_a_hand_off_is_counted_with_its_latency(tmp_path: Path, clock: Clock) -> None:
    """A message handed off 2 s after its 202 counts one hand-off, one message, and one
    accept-to-hand-off observation of 2 s; no failure of any class."""
    opencode = RecordingOpencode(tmp_path)
    config = Config(db=str(tmp_path / "p.db"), delivery="call")
    daemon = clock_daemon(config, clock, http=stub_client(opencode))
    repo_of(daemon).accept(new_message("ses_t"), now_ms(clock))
    clock.advance(2)
    daemon.start_delivery()
    _, _, text = scrape(daemon)
    assert sample(text, "pigeond_hand_offs_total") == 1
    assert sample(text, "pigeond_messages_handed_off_total") == 1
    assert sample(text, "pigeond_accept_to_hand_off_seconds_count") == 1
    assert sample(text, "pigeond_accept_to_hand_off_seconds_sum") == 2
    assert sample(text, 'pigeond_accept_to_hand_off_seconds_bucket{le="1.0"}') == 0
    assert sample(text, 'pigeond_accept_to_hand_off_seconds_bucket{le="2.5"}') == 1
    for failure_class in ("outage", "permanent", "attempt", "internal"):
        assert sample(text, f'pigeond_hand_off_failures_total{{class="{failure_class}"}}') == 0
    assert sample(text, "pigeond_opencode_reachable") == 1
