"""POST/GET /swarm/names and sends to ``@name``, through the daemon's API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock

from pigeond.api.names import NamesRoute
from pigeond.api.web import JsonApi
from pigeond.config import Config
from pigeond.service.daemon import Daemon
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from tests.authority_helpers import as_person, person_authority
from tests.http_helpers import API, client_headers, daemon_call, result_of, stub_client
from tests.openapi_check import check_body
from tests.storage_helpers import clock_daemon, repo_of

pytestmark = pytest.mark.both_backends

A, B, C = "ses_alice", "ses_bob", "ses_carol"


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Daemon:
    """Delivery off: no opencode to ask, so every holder counts as live; asked by a person
    (tests/test_authority_routes.py asks as sessions)."""
    return as_person(clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock))


def claim(daemon: Daemon, name: str, session: str, **more: Any) -> tuple[int, Any]:
    return daemon_call(daemon, "POST", "/swarm/names", {"name": name, "session": session} | more)


def test_a_claim_is_listed_with_since_and_last_seen(daemon: Daemon, clock: Clock) -> None:
    """POST gives the name; GET lists name, session, since and last seen."""
    now = int(clock.seconds() * 1000)
    assert claim(daemon, "reviewer", A) == (
        200, {"name": "reviewer", "session": A, "previous": None, "released": None}
    )  # fmt: skip
    assert daemon_call(daemon, "GET", "/swarm/names") == (
        200, {"names": [{"name": "reviewer", "session": A, "since": now, "last_seen": now}]}
    )  # fmt: skip


def test_a_name_held_by_a_live_session_is_refused(daemon: Daemon) -> None:
    """Without force, another session's claim is a 409 naming the holder; nothing moves."""
    claim(daemon, "reviewer", A)
    status, body = claim(daemon, "reviewer", B)
    assert (status, body["session"], body["name"]) == (409, A, "reviewer")
    assert "force" in body["error"]
    assert repo_of(daemon).name_holder("reviewer") == A


def test_force_moves_a_held_name(daemon: Daemon) -> None:
    """force: true takes the name from its holder, and says from whom."""
    claim(daemon, "reviewer", A)
    status, body = claim(daemon, "reviewer", B, force=True)
    assert (status, body["previous"]) == (200, A)
    assert repo_of(daemon).name_holder("reviewer") == B


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"name": "Reviewer", "session": A}, "field 'name' must be a name matching"),
        ({"name": "@reviewer", "session": A}, "field 'name' must be a name matching"),
        ({"name": "x" * 65, "session": A}, "field 'name' must be a name matching"),
        ({"name": "pigeond", "session": A}, "pigeond's own"),
        ({"session": A}, "field 'name' is required"),
        ({"name": "reviewer", "session": "alice"}, "field 'session' is required and must match"),
        ({"name": "reviewer", "session": A, "force": "yes"}, "field 'force' must be true or false"),
    ],
)
def test_a_bad_claim_is_a_400_naming_the_field(
    daemon: Daemon, body: dict[str, Any], error: str
) -> None:
    """Each malformed claim is refused with a 400 that says what is wrong."""
    status, answer = daemon_call(daemon, "POST", "/swarm/names", body)
    assert status == 400
    assert error in answer["error"]


def test_a_send_to_a_name_reaches_its_holder(daemon: Daemon) -> None:
    """to: "@reviewer" is stored for the holder's session, keeping the name and the sender's."""
    claim(daemon, "reviewer", B)
    claim(daemon, "lead", A)
    body = {"from": A, "to": "@reviewer", "payload": "review PR 7", "msg_id": "msg_n1"}
    assert daemon_call(daemon, "POST", "/swarm/send", body)[0] == 202
    stored = repo_of(daemon).get("msg_n1")
    assert stored is not None
    assert (stored.to_session, stored.to_name, stored.from_name) == (B, "reviewer", "lead")


def test_a_send_to_a_name_nobody_holds_is_a_404(daemon: Daemon) -> None:
    """An unheld name is refused at send with 404, and nothing is stored."""
    body = {"from": A, "to": "@ghost", "payload": "hello?", "msg_id": "msg_n2"}
    status, answer = daemon_call(daemon, "POST", "/swarm/send", body)
    assert (status, answer) == (
        404,
        {"error": "nobody holds the name @ghost (see GET /swarm/names)"},
    )
    assert repo_of(daemon).get("msg_n2") is None


@pytest.mark.parametrize("to", ["@", "@Reviewer", "@re viewer", "@pigeond", "reviewer"])
def test_a_malformed_name_target_is_a_400(daemon: Daemon, to: str) -> None:
    """A to that is neither a session id nor a valid @name is a 400 on field 'to'."""
    body = {"from": A, "to": to, "payload": "x"}
    status, answer = daemon_call(daemon, "POST", "/swarm/send", body)
    assert status == 400 and "field 'to'" in answer["error"]


def test_a_retried_send_to_a_name_that_moved_is_the_same_message(daemon: Daemon) -> None:
    """A retry of a stored msg_id answers 202 again, though the name moved meanwhile."""
    claim(daemon, "reviewer", B)
    body = {"from": A, "to": "@reviewer", "payload": "once", "msg_id": "msg_n3"}
    daemon_call(daemon, "POST", "/swarm/send", body)
    claim(daemon, "reviewer", C, force=True)
    assert daemon_call(daemon, "POST", "/swarm/send", body)[0] == 202
    assert repo_of(daemon).count_by_state() == {"queued": 1}


class Liveness:
    """opencode's answers about sessions: the ones it has; any other it answers 404."""

    def __init__(self, *alive: str) -> None:
        self.alive = set(alive)

    def invalidate(self, session_id: str) -> None:
        pass

    async def exists(self, session_id: str) -> bool | None:
        return session_id in self.alive


def claim_with(repo: SwarmRepository, clock: Clock, liveness: Liveness, body: Any) -> int:
    api = NamesRoute(InlineDatabase(repo), clock, liveness, person_authority(clock)).install(
        JsonApi()
    )
    stub = stub_client(api)
    response = result_of(stub.post(API + "/swarm/names", data=json.dumps(body).encode()))
    return int(response.code)


def test_a_name_whose_session_is_gone_is_claimed_freely(
    repo: SwarmRepository, clock: Clock
) -> None:
    """When opencode no longer has the holder, the name moves without force."""
    repo.claim_name("reviewer", A, 1000)
    assert claim_with(repo, clock, Liveness(B), {"name": "reviewer", "session": B}) == 200
    assert repo.name_holder("reviewer") == B


def test_a_name_whose_session_lives_needs_force(repo: SwarmRepository, clock: Clock) -> None:
    """When opencode still has the holder, the claim is a 409."""
    repo.claim_name("reviewer", A, 1000)
    assert claim_with(repo, clock, Liveness(A, B), {"name": "reviewer", "session": B}) == 409
    assert repo.name_holder("reviewer") == A


def test_names_answers_are_as_documented(daemon: Daemon) -> None:
    """The claim, the refusal and the listing match pigeond/api/openapi.json."""
    stub = stub_client(daemon.site.resource)
    headers = client_headers(daemon)
    for method, body in [
        ("POST", {"name": "reviewer", "session": A}),
        ("POST", {"name": "reviewer", "session": B}),
        ("GET", None),
    ]:
        data = None if body is None else json.dumps(body).encode()
        response = result_of(stub.request(method, API + "/swarm/names", data=data, headers=headers))
        raw_headers = {
            k.decode().lower(): v[0].decode() for k, v in response.headers.getAllRawHeaders()
        }
        check_body(
            method, "/swarm/names", response.code, raw_headers, result_of(response.content())
        )


# -- DELETE /swarm/names/<name> -------------------------------------------------------------


def release(daemon: Daemon, name: str, session: str | None = None) -> tuple[int, Any]:
    query = "" if session is None else f"?session={session}"
    return daemon_call(daemon, "DELETE", f"/swarm/names/{name}{query}")


def test_delete_releases_a_name_whoever_holds_it(daemon: Daemon) -> None:
    """Without session, DELETE frees the name and names the session that held it."""
    claim(daemon, "reviewer", A)
    assert release(daemon, "reviewer") == (
        200, {"released": True, "name": "reviewer", "session": A}
    )  # fmt: skip
    assert daemon_call(daemon, "GET", "/swarm/names") == (200, {"names": []})


def test_delete_for_the_holder_releases_it(daemon: Daemon) -> None:
    """?session= naming the holder frees the name."""
    claim(daemon, "reviewer", A)
    assert release(daemon, "reviewer", A)[0] == 200
    assert repo_of(daemon).name_holder("reviewer") is None


def test_delete_for_another_session_is_a_409_and_keeps_the_name(daemon: Daemon) -> None:
    """?session= naming someone else is a 409 naming the holder; the name stays."""
    claim(daemon, "reviewer", A)
    status, body = release(daemon, "reviewer", B)
    assert (status, body["name"], body["session"]) == (409, "reviewer", A)
    assert repo_of(daemon).name_holder("reviewer") == A


def test_delete_of_a_name_nobody_holds_is_a_404(daemon: Daemon) -> None:
    """A free name is a 404, with or without a session."""
    assert release(daemon, "ghost") == (
        404, {"error": "nobody holds the name ghost (see GET /swarm/names)"}
    )  # fmt: skip
    assert release(daemon, "ghost", A)[0] == 404


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/swarm/names/Reviewer", "the name in the path must match"),
        ("/swarm/names/@reviewer", "the name in the path must match"),
        ("/swarm/names/reviewer?session=alice", "query parameter 'session' must match"),
        (f"/swarm/names/reviewer?session={A}&session={B}", "given more than once"),
    ],
)
def test_a_bad_release_is_a_400(daemon: Daemon, path: str, error: str) -> None:
    """A malformed name or session is a 400 saying which, and nothing is released."""
    claim(daemon, "reviewer", A)
    status, answer = daemon_call(daemon, "DELETE", path)
    assert status == 400 and error in answer["error"]
    assert repo_of(daemon).name_holder("reviewer") == A


def test_a_released_name_is_sent_to_no_more(daemon: Daemon) -> None:
    """After the release a send to @reviewer is a 404 until someone claims it again."""
    claim(daemon, "reviewer", B)
    release(daemon, "reviewer", B)
    body = {"from": A, "to": "@reviewer", "payload": "still there?", "msg_id": "msg_n4"}
    assert daemon_call(daemon, "POST", "/swarm/send", body)[0] == 404
    claim(daemon, "reviewer", C)
    assert daemon_call(daemon, "POST", "/swarm/send", body)[0] == 202


def test_release_answers_are_as_documented(daemon: Daemon) -> None:
    """The release, the 409 and the 404 match pigeond/api/openapi.json."""
    claim(daemon, "reviewer", A)
    for session, status in [(B, 409), (A, 200), (None, 404)]:
        answer = release(daemon, "reviewer", session)
        assert answer[0] == status
        check_body(
            "DELETE", "/swarm/names/reviewer", status,
            {"content-type": "application/json; charset=utf-8"}, json.dumps(answer[1]).encode(),
        )  # fmt: skip
