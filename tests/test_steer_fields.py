"""Steering, as pigeond stores and shows it: a send's ``steer`` (urgent only) and a
session's policy that allows it, through the daemon's routes and the repository."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.consent import Policy
from pigeond.service.daemon import Daemon
from pigeond.storage import SwarmRepository
from testkit.messages import new_message
from tests.authority_helpers import as_person
from tests.http_helpers import daemon_call
from tests.storage_helpers import clock_daemon

pytestmark = pytest.mark.both_backends

A, B = "ses_a", "ses_b"
NOW_MS = 1_793_491_200_000


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Daemon:
    """A daemon with delivery off, asked by a person."""
    return as_person(clock_daemon(Config(db=str(tmp_path / "s.db"), opencode_url=""), clock))


def send(daemon: Daemon, **fields: object) -> tuple[int, dict[str, object]]:
    body = {"from": A, "to": B, "payload": "hi", **fields}
    return daemon_call(daemon, "POST", "/swarm/send", body)


@pytest.mark.parametrize("priority", [None, "normal", "low"])
def test_steer_without_urgent_is_a_400(daemon: Daemon, priority: str | None) -> None:
    """Only an urgent message may ask to steer: anything else is refused, naming it."""
    fields = {"steer": True} if priority is None else {"steer": True, "priority": priority}
    status, body = send(daemon, **fields)
    assert (status, body["error"]) == (400, "field 'steer' needs field 'priority' to be 'urgent'")


def test_steer_that_is_not_a_boolean_is_a_400(daemon: Daemon) -> None:
    """``steer`` is true or false."""
    status, body = send(daemon, steer="yes", priority="urgent")
    assert (status, body["error"]) == (400, "field 'steer' must be true or false")


def test_an_urgent_steer_is_stored_and_shown(daemon: Daemon) -> None:
    """The message keeps its ``steer``, and GET /swarm/message shows it."""
    status, sent = send(daemon, steer=True, priority="urgent")
    assert status == 202
    status, shown = daemon_call(daemon, "GET", f"/swarm/message/{sent['msg_id']}")
    assert (status, shown["steer"], shown["priority"]) == (200, True, "urgent")


def test_a_message_steer_reads_back(repo: SwarmRepository) -> None:
    """A message's ``steer`` round-trips through the database, and is part of its content."""
    asked = new_message(B, priority="urgent", steer=True)
    repo.accept(asked, NOW_MS)
    plain = new_message(B, priority="urgent")
    repo.accept(plain, NOW_MS)
    assert [(m.msg_id, m.steer) for m in repo.ready_batch(B, NOW_MS, 10)] == [
        (asked.msg_id, True), (plain.msg_id, False),
    ]  # fmt: skip
    stored = repo.get(asked.msg_id)
    assert stored is not None and not plain.same_content(stored)


def test_a_policy_that_only_allows_steering_is_kept(repo: SwarmRepository) -> None:
    """``accept`` with nobody listed but steering allowed is stored (not the default), and
    turning steering off again deletes the row."""
    repo.set_policy(B, Policy.ACCEPT, (), NOW_MS, "operator", steer=True)
    assert [(p.session, p.steer) for p in repo.policies()] == [(B, True)]
    assert repo.policy_of(B).steer
    repo.set_policy(B, Policy.ACCEPT, (), NOW_MS, "operator", steer=False)
    assert repo.policies() == []


def test_put_policy_sets_steer_and_keeps_it_when_omitted(daemon: Daemon) -> None:
    """PUT's ``steer`` is stored and shown; a later PUT without it keeps it."""
    status, body = daemon_call(
        daemon, "PUT", f"/swarm/policy/{B}", {"policy": "accept", "steer": True}
    )
    assert (status, body["steer"]) == (200, True)
    daemon_call(daemon, "PUT", f"/swarm/policy/{B}", {"policy": "hold"})
    status, read = daemon_call(daemon, "GET", f"/swarm/policy/{B}")
    assert (status, read["policy"], read["steer"]) == (200, "hold", True)


def test_put_policy_refuses_a_steer_that_is_not_a_boolean(daemon: Daemon) -> None:
    """``steer`` of a policy is true or false."""
    status, body = daemon_call(
        daemon, "PUT", f"/swarm/policy/{B}", {"policy": "accept", "steer": 1}
    )
    assert (status, body["error"]) == (400, "steer must be true or false")
