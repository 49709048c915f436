"""Each session's consent through the daemon: PUT/GET /swarm/policy/<session>, release,
and what a send meets (403 for refuse, a held 202 for hold), on the injected clock."""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import ANY

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.api.policy import REFRESH_S, PolicyBook
from pigeond.config import Config
from pigeond.consent import POLICIES, Policy
from pigeond.service.daemon import Daemon
from pigeond.storage import SwarmRepository
from testkit.messages import new_message
from tests.authority_helpers import as_person
from tests.http_helpers import API, client_headers, daemon_call, result_of, stub_client
from tests.openapi_check import check_body
from tests.sender_proof_support import FakeToolCalls, pending, plugin_send
from tests.storage_helpers import CountingDatabase, clock_daemon, repo_of

pytestmark = pytest.mark.both_backends

A, B, FRIEND = "ses_a", "ses_b", "ses_friend"
JSON_HEADERS = {"content-type": "application/json; charset=utf-8"}


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Daemon:
    """A daemon with delivery off: what is due stays queued for the test to read; asked by a
    person (tests/test_authority_routes.py asks as sessions)."""
    return as_person(clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock))


def send(daemon: Daemon, sender: str = A) -> tuple[int, dict[str, object]]:
    return daemon_call(daemon, "POST", "/swarm/send", {"from": sender, "to": B, "payload": "hi"})


def put(daemon: Daemon, body: object, session: str = B) -> tuple[int, dict[str, object]]:
    return daemon_call(daemon, "PUT", f"/swarm/policy/{session}", body)


def due_ids(daemon: Daemon, clock: Clock) -> list[str]:
    repo = repo_of(daemon)
    return [m.msg_id for m in repo.ready_batch(B, int(clock.seconds() * 1000), 50)]


def test_put_sets_the_policy_and_get_reads_it(daemon: Daemon) -> None:
    """PUT answers the stored policy; GET reads it back with its held count."""
    status, body = put(daemon, {"policy": "hold", "allow": [FRIEND]})
    assert (status, body["policy"], body["allow"]) == (200, "hold", [FRIEND])
    status, read = daemon_call(daemon, "GET", f"/swarm/policy/{B}")
    assert (status, read["policy"], read["allow"], read["held"]) == (200, "hold", [FRIEND], 0)


def test_refuse_answers_403_naming_the_policy(daemon: Daemon) -> None:
    """A refusing target's senders get 403 at send, and nothing is stored."""
    put(daemon, {"policy": "refuse"})
    status, body = send(daemon)
    assert status == 403 and "inbound policy is refuse" in str(body["error"])
    assert body["policy"] == "refuse"
    assert repo_of(daemon).count_queued_for(B) == 0


def tool_send(daemon: Daemon, sender: str = FRIEND, call_id: str = "call_1") -> str:
    """A send by ``sender``'s own swarm_send call, found in its transcript: its msg_id once
    the sender-proof job has settled it."""
    calls = FakeToolCalls()
    assert daemon.proofs is not None
    daemon.proofs.reader = calls
    status, body = daemon_call(
        daemon, "POST", "/swarm/send", plugin_send(calls, sender, B, "hi", call_id)
    )
    assert status == 202
    result_of(daemon.proofs.tick())
    stored = repo_of(daemon).get(str(body["msg_id"]))
    assert stored is not None and stored.from_proof == "verified"
    return str(body["msg_id"])


def test_refuse_lets_the_allow_list_through(daemon: Daemon, clock: Clock) -> None:
    """A verified sender on the allow-list is delivered as usual under refuse."""
    put(daemon, {"policy": "refuse", "allow": [FRIEND]})
    msg_id = tool_send(daemon)
    assert due_ids(daemon, clock) == [msg_id]


def test_refuse_refuses_an_unverified_sender_the_allow_list_names(daemon: Daemon) -> None:
    """Writing ``from: ses_friend`` is no way past a list naming ses_friend: 403, and the
    error says the sender is not verified."""
    put(daemon, {"policy": "refuse", "allow": [FRIEND]})
    status, body = send(daemon, FRIEND)
    assert status == 403 and f"sender {FRIEND} not verified" in str(body["error"])
    assert repo_of(daemon).count_queued_for(B) == 0


def test_hold_holds_an_unverified_sender_the_allow_list_names(daemon: Daemon) -> None:
    """Under hold, a forged listed sender is held, and the reason says it is not verified."""
    put(daemon, {"policy": "hold", "allow": [FRIEND]})
    status, body = send(daemon, FRIEND)
    stored = repo_of(daemon).get(str(body["msg_id"]))
    assert status == 202 and stored is not None and stored.hold_kind == "consent"
    assert f"sender {FRIEND} not verified" in str(stored.last_error)


def test_hold_stores_the_message_and_keeps_it_back(daemon: Daemon, clock: Clock) -> None:
    """Under hold a send is accepted (202) but never due, and says why it waits."""
    put(daemon, {"policy": "hold"})
    status, body = send(daemon)
    assert status == 202 and due_ids(daemon, clock) == []
    stored = repo_of(daemon).get(str(body["msg_id"]))
    assert stored is not None and stored.state == "queued"
    assert stored.last_error is not None and stored.last_error.startswith("held:")


def test_switching_to_accept_releases_the_held_messages(daemon: Daemon, clock: Clock) -> None:
    """PUT accept releases what was held, and says how many."""
    put(daemon, {"policy": "hold"})
    _, first = send(daemon)
    _, second = send(daemon)
    status, body = put(daemon, {"policy": "accept"})
    assert (status, body["released"]) == (200, 2)
    assert due_ids(daemon, clock) == [first["msg_id"], second["msg_id"]]


def test_release_route_releases_and_keeps_holding(daemon: Daemon, clock: Clock) -> None:
    """POST /swarm/release/<session> releases what is held now; the next is held again."""
    put(daemon, {"policy": "hold"})
    _, first = send(daemon)
    assert daemon_call(daemon, "POST", f"/swarm/release/{B}", {}) == (
        200, {"session": B, "released": 1},
    )  # fmt: skip
    send(daemon)
    assert due_ids(daemon, clock) == [first["msg_id"]]


def test_omitting_allow_keeps_the_allow_list(daemon: Daemon) -> None:
    """A PUT without ``allow`` changes only the policy."""
    put(daemon, {"policy": "hold", "allow": [FRIEND]})
    assert put(daemon, {"policy": "refuse"})[1]["allow"] == [FRIEND]


def test_a_null_allow_keeps_the_allow_list_as_documented(daemon: Daemon) -> None:
    """``"allow": null`` is the same as leaving it out (the OpenAPI document says so)."""
    put(daemon, {"policy": "hold", "allow": [FRIEND]})
    assert put(daemon, {"policy": "refuse", "allow": None})[1]["allow"] == [FRIEND]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"policy": "maybe"}, f"policy must be one of {', '.join(POLICIES)}"),
        ({}, f"policy must be one of {', '.join(POLICIES)}"),
        ({"policy": "hold", "allow": "ses_x"}, "allow must be a list of senders"),
        ({"policy": "hold", "allow": ["bad name!"]}, "each allow entry must match"),
        ([1], "body must be a JSON object"),
    ],
)
def test_a_bad_policy_body_is_a_400(daemon: Daemon, body: object, error: str) -> None:
    """Every malformed PUT gets a 400 naming what is wrong."""
    status, answer = put(daemon, body)
    assert status == 400 and str(answer["error"]).startswith(error)


def test_a_bad_session_is_a_400(daemon: Daemon) -> None:
    """The session in the path must look like one."""
    status, answer = put(daemon, {"policy": "hold"}, session="nobody")
    assert status == 400 and "session must match" in str(answer["error"])


def test_a_policy_written_elsewhere_is_picked_up_by_the_refresh(
    daemon: Daemon, clock: Clock
) -> None:
    """A policy another process wrote applies to sends after the next refresh, and to
    what the daemon accepted meanwhile."""
    daemon.jobs.startService()
    try:
        repo: SwarmRepository = repo_of(daemon)
        repo.set_policy(B, Policy.HOLD, (), int(clock.seconds() * 1000), "operator")
        send(daemon)  # accepted under the policy the daemon knew: accept
        clock.advance(REFRESH_S)
        assert due_ids(daemon, clock) == []
        assert send(daemon)[0] == 202 and due_ids(daemon, clock) == []
    finally:
        daemon.jobs.stopService()


def test_a_put_omitting_steer_and_allow_keeps_what_another_process_stored(
    daemon: Daemon, clock: Clock
) -> None:
    """An operator's ``pigeon policy set --steer`` (another process), then the session's own
    change of its policy alone, before the daemon's refresh: steering and the allow-list
    stay as the operator left them."""
    assert put(daemon, {"policy": "accept"})[0] == 200  # the daemon knows B: no steering
    repo_of(daemon).set_policy(B, Policy.ACCEPT, (A,), int(clock.seconds() * 1000),
                               "operator", steer=True)  # fmt: skip
    status, answer = put(daemon, {"policy": "hold"})
    assert status == 200, answer
    stored = repo_of(daemon).policy_of(B)
    assert (stored.policy, stored.allow, stored.steer) == (Policy.HOLD, (A,), True)


def test_policies_lists_every_session_that_set_one(daemon: Daemon) -> None:
    """GET /swarm/policies lists the stored policies with their held counts."""
    put(daemon, {"policy": "hold"})
    send(daemon)
    status, body = daemon_call(daemon, "GET", "/swarm/policies")
    assert status == 200
    assert [(p["session"], p["policy"], p["held"]) for p in body["policies"]] == [(B, "hold", 1)]


def test_the_policy_answers_are_the_documented_ones(daemon: Daemon) -> None:
    """PUT, GET, release and the list answer with the schemas openapi.json documents."""
    put(daemon, {"policy": "hold", "allow": [FRIEND]})
    send(daemon)
    calls = [
        ("PUT", f"/swarm/policy/{B}", {"policy": "hold"}),
        ("GET", f"/swarm/policy/{B}", None),
        ("GET", "/swarm/policy/ses_nobody", None),
        ("POST", f"/swarm/release/{B}", {}),
        ("GET", "/swarm/policies", None),
    ]
    for method, path, body in calls:
        status, answer = daemon_call(daemon, method, path, body)
        assert status == 200, (path, answer)
        check_body(method, path, status, JSON_HEADERS, json.dumps(answer).encode())


def test_a_put_that_is_not_json_is_415(daemon: Daemon) -> None:
    """A PUT is held to JSON like a POST: a web page cannot set a policy cross-site."""
    headers = client_headers(daemon)
    headers.setRawHeaders("Content-Type", ["text/plain"])
    api = stub_client(daemon.site.resource)
    response = result_of(
        api.request("PUT", f"{API}/swarm/policy/{B}", data=b'{"policy":"hold"}', headers=headers)
    )
    assert response.code == 415
    assert repo_of(daemon).policies() == []


# -- names on the allow-list, retries, and what the judgement reads ----------------------


def claim(daemon: Daemon, name: str, session: str) -> None:
    status, answer = daemon_call(daemon, "POST", "/swarm/names", {"name": name, "session": session})
    assert status == 200, answer


@pytest.mark.parametrize("policy", ["hold", "refuse"])
def test_a_name_on_the_allow_list_lets_its_holder_through(
    daemon: Daemon, clock: Clock, policy: str
) -> None:
    """``@builder`` on the list: the session holding builder is delivered as usual."""
    claim(daemon, "builder", FRIEND)
    put(daemon, {"policy": policy, "allow": ["@builder"]})
    msg_id = tool_send(daemon)
    assert due_ids(daemon, clock) == [msg_id]


def test_a_name_on_the_allow_list_follows_the_name(daemon: Daemon) -> None:
    """Once builder moves to another session, its former holder is refused again."""
    claim(daemon, "builder", FRIEND)
    put(daemon, {"policy": "refuse", "allow": ["@builder"]})
    daemon_call(daemon, "POST", "/swarm/names", {"name": "builder", "session": A, "force": True})
    assert send(daemon, FRIEND)[0] == 403
    tool_send(daemon, A)


def test_a_sender_without_the_listed_name_is_still_refused(daemon: Daemon) -> None:
    """Holding another name, or none, is no way past ``@builder``."""
    claim(daemon, "tester", A)
    put(daemon, {"policy": "refuse", "allow": ["@builder"]})
    assert send(daemon, A)[0] == 403
    assert send(daemon, "ses_nameless")[0] == 403


def test_a_retried_send_to_a_target_that_now_refuses_is_still_202(daemon: Daemon) -> None:
    """A msg_id stored before the target refused is answered 202 again, stored once."""
    body = {"from": A, "to": B, "payload": "hi", "msg_id": "msg_retry1"}
    assert daemon_call(daemon, "POST", "/swarm/send", body)[0] == 202
    put(daemon, {"policy": "refuse"})
    assert daemon_call(daemon, "POST", "/swarm/send", body) == (
        202, {"accepted": True, "msg_id": "msg_retry1", "thread": ANY, "target_checked": False},
    )  # fmt: skip
    assert repo_of(daemon).count_queued_for(B) == 1


def test_a_reused_msg_id_with_new_content_is_still_refused(daemon: Daemon) -> None:
    """Only a true retry (same content) gets past refuse; a new message under an old
    msg_id gets the 403 like any other."""
    body = {"from": A, "to": B, "payload": "hi", "msg_id": "msg_retry2"}
    daemon_call(daemon, "POST", "/swarm/send", body)
    put(daemon, {"policy": "refuse"})
    status, _ = daemon_call(daemon, "POST", "/swarm/send", body | {"payload": "other"})
    assert status == 403


def judged(repo: SwarmRepository, clock: Clock, allow: tuple[str, ...], sender: str) -> list[str]:
    """What the judgement of one send from ``sender`` to B (held, allowing ``allow``) read."""
    repo.set_policy(B, Policy.HOLD, allow, 1000, "test")
    db = CountingDatabase(repo)
    book = PolicyBook(db, clock)
    result_of(book.load())
    db.reads.clear()
    result_of(Deferred.fromCoroutine(book.judge(new_message(B, sender=sender), pending())))
    return db.reads


def test_judging_reads_the_senders_name_only_when_the_list_names_one(
    repo: SwarmRepository, clock: Clock
) -> None:
    """A list of session ids, or a sender on it, costs no read; ``@name`` on it, one."""
    assert judged(repo, clock, (FRIEND,), A) == []
    assert judged(repo, clock, (A, "@builder"), A) == []
    assert judged(repo, clock, (FRIEND, "@builder"), A) == ["name_of"]
