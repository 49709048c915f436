"""The pair brakes on the send path (pigeond/brakes/pair.py wired by the daemon): a send
past the pair's rate, or the repeat past the pair's limit, is stored held for a person,
its 202 says held and why; a reload changes the limits, a release with reset starts the
pair's count over, a person's own send is never braked.  On the injected clock."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.service.daemon import Daemon
from tests.fixed_time import now_ms
from tests.http_helpers import daemon_call
from tests.storage_helpers import clock_daemon, repo_of

A, B = "ses_a", "ses_b"
RATE_REASON = (
    "ses_a sent 4 messages to ses_b in the last minute (limit 3); a person must release it"
)


@pytest.fixture
def config(tmp_path: Path) -> Config:
    """Delivery off (what is due stays queued), the hop brake off so the pair brakes are
    what a loop meets, and small pair limits."""
    return Config(
        db=str(tmp_path / "p.db"),
        opencode_url="",
        max_hops_per_thread=0,
        max_pair_messages_per_minute=3,
        max_repeats_per_pair=2,
    )


@pytest.fixture
def daemon(config: Config, clock: Clock) -> Daemon:
    return clock_daemon(config, clock)


def send(daemon: Daemon, payload: str, sender: str = A, to: str = B) -> dict[str, Any]:
    status, body = daemon_call(
        daemon, "POST", "/swarm/send", {"from": sender, "to": to, "payload": payload}
    )
    assert status == 202, body
    return dict(body)


def due(daemon: Daemon, clock: Clock) -> list[str]:
    return [m.msg_id for m in repo_of(daemon).ready_batch(B, now_ms(clock), 50)]


def test_a_send_past_the_pairs_rate_is_held_with_its_reason(daemon: Daemon, clock: Clock) -> None:
    """The 4th message of a minute (limit 3) answers 202 held, with the brake and its reason,
    is stored held (listed, not due), and the three before it are due."""
    sent = [send(daemon, f"step {word}") for word in ("one", "two", "three")]
    assert all("held" not in body for body in sent)
    held = send(daemon, "step four")
    assert held["accepted"] is True
    assert held["held"] == {"brake": "pair_rate", "reason": RATE_REASON}
    assert due(daemon, clock) == [body["msg_id"] for body in sent]
    status, listed = daemon_call(daemon, "GET", "/swarm/held")
    [entry] = listed["held"]
    assert status == 200
    assert (entry["msg_id"], entry["brake"], entry["reason"]) == (
        held["msg_id"], "pair_rate", RATE_REASON,
    )  # fmt: skip


def test_a_repeat_past_the_pairs_limit_is_held(daemon: Daemon) -> None:
    """The 3rd near-identical payload between two sessions (limit 2), either way, is held."""
    send(daemon, "Thanks! (msg_1)")
    send(daemon, "thanks!  (msg_2)", sender=B, to=A)
    held = send(daemon, "THANKS! (msg_3)")
    assert held["held"] == {
        "brake": "repeat",
        "reason": "ses_a and ses_b exchanged 3 near-identical messages in 10 min (limit 2);"
        " a person must release it",
    }


def test_the_window_slides_on_the_clock(daemon: Daemon, clock: Clock) -> None:
    """A minute after the first of three sends, the next send goes again."""
    for word in ("one", "two", "three"):
        send(daemon, f"step {word}")
        clock.advance(1)
    clock.advance(57)
    assert "held" not in send(daemon, "step four")


def test_a_reload_changes_the_pairs_limit(daemon: Daemon, config: Config) -> None:
    """A reload that turns the rate off (0) lets the next send go at once."""
    for word in ("one", "two", "three"):
        send(daemon, f"step {word}")
    daemon.reload(replace(config, max_pair_messages_per_minute=0))
    assert "held" not in send(daemon, "step four")


def test_a_release_with_reset_starts_the_pairs_count_over(daemon: Daemon, clock: Clock) -> None:
    """Released with reset, the held message is due, and the pair may send again at once."""
    for word in ("one", "two", "three"):
        send(daemon, f"step {word}")
    held = send(daemon, "step four")
    clock.advance(1)
    status, _ = daemon_call(
        daemon, "POST", f"/swarm/held/{held['msg_id']}/release", {"mode": "reset"}
    )
    assert status == 200
    assert held["msg_id"] in due(daemon, clock)
    assert "held" not in send(daemon, "step five")


def test_a_release_once_keeps_the_pair_braked(daemon: Daemon, clock: Clock) -> None:
    """Released once, the held message goes, and it counts: the next send is held again."""
    for word in ("one", "two", "three"):
        send(daemon, f"step {word}")
    held = send(daemon, "step four")
    daemon_call(daemon, "POST", f"/swarm/held/{held['msg_id']}/release", {"mode": "once"})
    assert send(daemon, "step five")["held"]["brake"] == "pair_rate"


def test_a_persons_sends_are_never_braked(daemon: Daemon) -> None:
    """A shell's sends (the sender is no session id) go whatever their rate and sameness."""
    answers = [send(daemon, "same again", sender="alice") for _ in range(6)]
    assert all("held" not in body for body in answers)


def test_the_pairs_count_survives_a_restart(config: Config, clock: Clock) -> None:
    """The window is read from the database: a daemon started again on it holds the next
    send of a pair that reached its rate before the restart."""
    first = clock_daemon(config, clock)
    for word in ("one", "two", "three"):
        send(first, f"step {word}")
    first.db.close()
    again = clock_daemon(config, clock)
    assert send(again, "step four")["held"]["brake"] == "pair_rate"
