"""Threads and brake holds through the daemon, on the injected clock: the send's thread
and held 202, GET /swarm/message's thread and hold, /swarm/threads, /swarm/held, and a
person's release and drop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.model import NOTICE_KIND
from pigeond.service.daemon import Daemon
from tests.http_helpers import daemon_call
from tests.openapi_check import check_body
from tests.storage_helpers import clock_daemon, repo_of

A, B = "ses_a", "ses_b"
LIMIT = 3
JSON_HEADERS = {"content-type": "application/json; charset=utf-8"}


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Daemon:
    """Delivery off (what is due stays queued for the test to read), 3 hops a thread."""
    config = Config(db=str(tmp_path / "p.db"), opencode_url="", max_hops_per_thread=LIMIT)
    return clock_daemon(config, clock)


def call(daemon: Daemon, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One request, its answer checked against the OpenAPI description."""
    status, answer = daemon_call(daemon, method, path, body)
    check_body(method, path, status, JSON_HEADERS, json.dumps(answer).encode())
    return status, answer


def send(daemon: Daemon, sender: str = A, to: str = B, **fields: Any) -> dict[str, Any]:
    status, answer = call(
        daemon, "POST", "/swarm/send", {"from": sender, "to": to, "payload": "hi", **fields}
    )
    assert status == 202, answer
    return dict(answer)


def loop(daemon: Daemon, count: int) -> list[dict[str, Any]]:
    """``count`` replies back and forth between A and B, each to the one before."""
    answers = [send(daemon)]
    for i in range(1, count):
        sender, to = (B, A) if i % 2 else (A, B)
        answers.append(send(daemon, sender, to, reply_to=answers[-1]["msg_id"]))
    return answers


def due(daemon: Daemon, clock: Clock, target: str = B) -> list[str]:
    now = int(clock.seconds() * 1000)
    return [m.msg_id for m in repo_of(daemon).ready_batch(target, now, 50)]


def test_a_send_starts_a_thread_and_a_reply_continues_it(daemon: Daemon) -> None:
    """A new send gets a new thr_ id; a reply is in its message's thread."""
    first = send(daemon)
    assert str(first["thread"]).startswith("thr_")
    reply = send(daemon, B, A, reply_to=first["msg_id"])
    assert reply["thread"] == first["thread"]
    assert send(daemon)["thread"] != first["thread"]


def test_a_named_thread_is_kept(daemon: Daemon) -> None:
    """A send that names its thread is in it, whatever it replies to."""
    first = send(daemon)
    assert send(daemon, reply_to=first["msg_id"], thread="review:42")["thread"] == "review:42"


def test_an_invalid_thread_is_refused(daemon: Daemon) -> None:
    """A thread that is no id is a 400 naming the field, and nothing is stored."""
    status, answer = call(
        daemon, "POST", "/swarm/send", {"from": A, "to": B, "payload": "x", "thread": "a b"}
    )
    assert status == 400 and "'thread'" in answer["error"]
    assert repo_of(daemon).count_queued_for(B) == 0


def test_a_reply_to_an_unknown_message_starts_a_thread(daemon: Daemon) -> None:
    """reply_to names nothing stored: the send starts a new thread."""
    assert str(send(daemon, reply_to="msg_gone")["thread"]).startswith("thr_")


def test_the_send_past_the_limit_is_held_with_its_reason(daemon: Daemon, clock: Clock) -> None:
    """The 202 of the send past max_hops_per_thread says held, with brake and reason."""
    answers = loop(daemon, LIMIT + 1)
    assert all("held" not in a for a in answers[:LIMIT])
    thread = answers[0]["thread"]
    assert answers[LIMIT]["held"] == {
        "brake": "hops",
        "reason": f"thread {thread} reached {LIMIT} hops without a person;"
        " a person must release it",
    }
    assert answers[LIMIT]["msg_id"] not in due(daemon, clock, A)


def test_a_retried_held_send_is_answered_held(daemon: Daemon) -> None:
    """The same send again (same msg_id): 202, the same thread, still held."""
    answers = loop(daemon, LIMIT)
    body = {"msg_id": "msg_again", "reply_to": answers[-1]["msg_id"]}
    held = send(daemon, B, A, **body)
    assert "held" in held
    assert send(daemon, B, A, **body) == held


def test_the_message_shows_its_thread_and_hold(daemon: Daemon) -> None:
    """GET /swarm/message: the thread, and the brake hold while it lasts."""
    answers = loop(daemon, LIMIT + 1)
    status, shown = call(daemon, "GET", f"/swarm/message/{answers[LIMIT]['msg_id']}")
    assert status == 200 and shown["thread"] == answers[0]["thread"]
    assert shown["hold"]["kind"] == "brake" and shown["hold"]["brake"] == "hops"
    assert shown["expires_at"] is None
    _, plain = call(daemon, "GET", f"/swarm/message/{answers[0]['msg_id']}")
    assert plain["hold"] is None


def test_threads_are_listed_newest_first(daemon: Daemon, clock: Clock) -> None:
    """GET /swarm/threads: hops, messages and held of each, the latest first."""
    old = loop(daemon, LIMIT + 1)[0]["thread"]
    clock.advance(1)
    new = send(daemon)["thread"]
    status, answer = call(daemon, "GET", "/swarm/threads")
    assert status == 200
    assert [t["thread"] for t in answer["threads"]] == [new, old]
    first = answer["threads"][1]
    assert (first["hops"], first["messages"], first["held"]) == (LIMIT, LIMIT + 1, 1)


def test_held_lists_what_waits_for_a_person(daemon: Daemon) -> None:
    """GET /swarm/held: msg_id, from, to, thread, brake, reason and a preview."""
    answers = loop(daemon, LIMIT + 1)
    status, answer = call(daemon, "GET", "/swarm/held")
    [held] = answer["held"]
    assert status == 200 and held["msg_id"] == answers[LIMIT]["msg_id"]
    assert (held["from"], held["to"], held["thread"], held["brake"]) == (
        B, A, answers[0]["thread"], "hops",
    )  # fmt: skip
    assert held["preview"] == "hi"
    _, other = call(daemon, "GET", "/swarm/held?thread=thr_other")
    assert other["held"] == []


def test_release_reset_delivers_and_starts_over(daemon: Daemon, clock: Clock) -> None:
    """Released with reset: due now, and the thread has its whole limit again."""
    answers = loop(daemon, LIMIT + 1)
    held = answers[LIMIT]["msg_id"]
    status, answer = call(daemon, "POST", f"/swarm/held/{held}/release", {"mode": "reset"})
    assert (status, answer) == (200, {"msg_id": held, "released": True, "mode": "reset", "by": 0})
    assert held in due(daemon, clock, A)
    thread = repo_of(daemon).thread(answers[0]["thread"])
    assert thread is not None and thread.hops == 0


def test_an_empty_release_resets(daemon: Daemon) -> None:
    """No body (or {}) is mode reset."""
    held = loop(daemon, LIMIT + 1)[LIMIT]["msg_id"]
    assert call(daemon, "POST", f"/swarm/held/{held}/release")[1]["mode"] == "reset"


def test_release_raise_grows_the_threads_limit(daemon: Daemon) -> None:
    """raise N: the thread may go N hops further before the next hold."""
    answers = loop(daemon, LIMIT + 1)
    held = answers[LIMIT]["msg_id"]
    status, _ = call(daemon, "POST", f"/swarm/held/{held}/release", {"mode": "raise", "by": 2})
    assert status == 200
    thread = repo_of(daemon).thread(answers[0]["thread"])
    assert thread is not None and thread.hop_limit == LIMIT + 2


def test_release_once_lets_only_this_one_go(daemon: Daemon) -> None:
    """once: the next agent's send in the thread is held again."""
    answers = loop(daemon, LIMIT + 1)
    held = answers[LIMIT]["msg_id"]
    call(daemon, "POST", f"/swarm/held/{held}/release", {"mode": "once"})
    nxt = send(daemon, A, B, reply_to=held)
    assert nxt["thread"] == answers[0]["thread"] and "held" in nxt


@pytest.mark.parametrize(
    "body",
    [{"mode": "later"}, {"mode": "raise"}, {"mode": "raise", "by": 0}, {"mode": "once", "by": 1},
     {"mode": "raise", "by": True}, [1]],
)  # fmt: skip
def test_a_bad_release_is_a_400(daemon: Daemon, body: Any) -> None:
    """An unknown mode, raise without a positive by, by without raise: 400, still held."""
    held = loop(daemon, LIMIT + 1)[LIMIT]["msg_id"]
    status, answer = call(daemon, "POST", f"/swarm/held/{held}/release", body)
    assert status == 400, answer
    assert [h.msg_id for h in repo_of(daemon).held_messages()] == [held]


def test_unknown_and_unheld_messages(daemon: Daemon) -> None:
    """404 for no such message, 409 for one no brake holds, 400 for no msg_id."""
    plain = send(daemon)["msg_id"]
    for verb in ("release", "drop"):
        assert call(daemon, "POST", f"/swarm/held/msg_none/{verb}", {})[0] == 404
        status, answer = call(daemon, "POST", f"/swarm/held/{plain}/{verb}", {})
        assert (status, answer["state"]) == (409, "queued")
        assert call(daemon, "POST", f"/swarm/held/nope/{verb}", {})[0] == 400


def test_drop_cancels_and_tells_the_sender(daemon: Daemon, clock: Clock) -> None:
    """Dropped: cancelled for good, and its sender gets the failure notice saying so."""
    answers = loop(daemon, LIMIT + 1)
    held = answers[LIMIT]["msg_id"]
    status, answer = call(daemon, "POST", f"/swarm/held/{held}/drop", {})
    assert (status, answer) == (200, {"msg_id": held, "dropped": True})
    _, shown = call(daemon, "GET", f"/swarm/message/{held}")
    assert (shown["state"], shown["last_error"], shown["hold"]) == (
        "cancelled", "dropped by a person", None,
    )  # fmt: skip
    notices = [m for m in repo_of(daemon).ready_batch(B, int(clock.seconds() * 1000), 50)
               if m.kind == NOTICE_KIND]  # fmt: skip
    assert len(notices) == 1 and "dropped by a person" in notices[0].payload
    assert call(daemon, "POST", f"/swarm/held/{held}/drop", {})[0] == 409


def test_a_reload_turns_the_brake_off(daemon: Daemon) -> None:
    """max_hops_per_thread reloaded to 0: the thread's next send goes."""
    answers = loop(daemon, LIMIT)
    daemon.reload(Config(db=daemon.config.db, opencode_url="", max_hops_per_thread=0))
    assert "held" not in send(daemon, B, A, reply_to=answers[-1]["msg_id"])
