"""A send to a session opencode does not have is refused at once (404), not failed later;
when opencode cannot be asked, the send is queued as before and the 202 says
``target_checked: false``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, cast
from unittest.mock import ANY

import pytest
from treq.client import HTTPClient
from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.web import server
from twisted.web.resource import Resource

from pigeond.api.target_check import TargetCheck
from pigeond.config import Config
from pigeond.consent import Policy
from pigeond.service.daemon import Daemon
from testkit.messages import new_message
from tests.http_helpers import API, client_headers, daemon_call, result_of
from tests.openapi_check import check_body
from tests.storage_helpers import clock_daemon, repo_of

URL = "http://127.0.0.1:4096"


class SessionsOpencode(Resource):
    """opencode's ``GET /session/<id>``, as measured on 1.18.33: 200 with the directory for
    a session it has, 404 ``NotFoundError`` otherwise; ``mode`` "down" answers 503 (an
    outage), "hang" answers nothing until :meth:`answer_held`."""

    isLeaf = True

    def __init__(self, directory: Path, sessions: set[str]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.directory = str(directory)
        self.sessions = sessions
        self.mode = "up"
        self.lookups: list[str] = []
        self.held: list[server.Request] = []
        self.stub: StubTreq | None = None  # the client serving it, to flush late answers

    def render(self, request: server.Request) -> bytes | int:
        path = (request.path or b"").decode()
        if path.startswith("/session/") and path.count("/") == 2:
            self.lookups.append(path.removeprefix("/session/"))
        if self.mode == "down":
            request.setResponseCode(503)
            return b"starting"
        if self.mode == "hang":
            self.held.append(request)
            return server.NOT_DONE_YET
        return self._answer(request, path)

    def _answer(self, request: server.Request, path: str) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        session = path.removeprefix("/session/").split("/")[0]
        if path == "/session/status":
            return b"{}"
        if session in self.sessions:
            if path.endswith("/prompt_async"):
                request.setResponseCode(204)
                return b""
            if path.endswith("/message"):
                return b"[]"
            return json.dumps({"id": session, "directory": self.directory}).encode()
        request.setResponseCode(404)
        message = f"Session not found: {session}"
        return json.dumps({"name": "NotFoundError", "data": {"message": message}}).encode()

    def answer_held(self) -> None:
        for request in self.held:
            request.write(self._answer(request, (request.path or b"").decode()))
            request.finish()
        self.held.clear()
        if self.stub is not None:
            self.stub.flush()


@pytest.fixture
def opencode(tmp_path: Path) -> SessionsOpencode:
    return SessionsOpencode(tmp_path, {"ses_known", "ses_other"})


def build(tmp_path: Path, clock: Clock, opencode: Resource, **config: Any) -> Daemon:
    defaults: dict[str, Any] = {
        "db": str(tmp_path / "p.db"),
        "delivery": "call",
        "opencode_url": URL,
    }
    settings = Config(**(defaults | config))  # fmt: skip
    stub = StubTreq(opencode)
    if isinstance(opencode, SessionsOpencode):
        opencode.stub = stub
    return clock_daemon(settings, clock, http=stub)  # type: ignore[arg-type]


def send(daemon: Daemon, **fields: Any) -> tuple[int, Any]:
    body = {"from": "ses_sender", "to": "ses_known", "payload": "hi"} | fields
    status, answer = daemon_call(daemon, "POST", "/swarm/send", body)
    raw = json.dumps(answer).encode()
    check_body("POST", "/swarm/send", status, {"content-type": "application/json"}, raw)
    return status, answer


def send_later(daemon: Daemon, api: StubTreq, **fields: Any) -> Deferred[Any]:
    """A send whose answer may wait (for opencode): ``api.flush()`` once it can come;
    fires with (status, JSON)."""
    body = {"from": "ses_sender", "to": "ses_known", "payload": "hi"} | fields
    sent = cast(HTTPClient, api).request(
        "POST", API + "/swarm/send", data=json.dumps(body).encode(), headers=client_headers(daemon)
    )

    async def answer() -> tuple[int, Any]:
        response = await sent
        return int(response.code), json.loads(await response.content())

    return Deferred.fromCoroutine(answer())


def test_unknown_target_is_refused_with_404_naming_it(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """opencode up and no such session: 404 at once, naming the session and opencode."""
    daemon = build(tmp_path, clock, opencode)
    status, answer = send(daemon, to="ses_nope", msg_id="msg_1")
    assert (status, answer) == (404, {"error": f"no session ses_nope in opencode at {URL}"})
    assert repo_of(daemon).get("msg_1") is None


def test_existing_target_is_accepted_as_checked(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """A target opencode has: 202 with target_checked true, the message stored."""
    daemon = build(tmp_path, clock, opencode)
    assert send(daemon, msg_id="msg_1") == (
        202, {"accepted": True, "msg_id": "msg_1", "thread": ANY, "target_checked": True}
    )  # fmt: skip
    assert repo_of(daemon).get("msg_1") is not None


def test_a_known_target_costs_no_lookup(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """Once opencode named a session, further sends to it within registry_ttl_s ask nothing:
    the one lookup is the one the first send made, which the hand-off then reuses."""
    daemon = build(tmp_path, clock, opencode)
    for n in range(5):
        assert send(daemon, msg_id=f"msg_{n}")[1]["target_checked"] is True
    assert opencode.lookups == ["ses_known"]


def test_the_check_of_a_cached_target_is_a_plain_bool(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """A cached target is answered on the spot: nothing for the accept path to await."""
    daemon = build(tmp_path, clock, opencode)
    send(daemon, msg_id="msg_1")
    assert daemon.delivery is not None
    check = TargetCheck(daemon.delivery.registry, URL, clock, daemon.db, daemon.config)
    assert check(new_message("ses_known", msg_id="msg_2")) is True


def test_a_lookup_older_than_the_registry_ttl_is_made_again(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """The cache is the registry's: after registry_ttl_s the session is asked about again."""
    daemon = build(tmp_path, clock, opencode, registry_ttl_s=60)
    send(daemon, msg_id="msg_1")
    clock.advance(61)
    send(daemon, msg_id="msg_2")
    assert opencode.lookups.count("ses_known") == 2


def test_unreachable_opencode_accepts_unchecked(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """opencode down: the send is queued as before, and the 202 says target_checked false."""
    opencode.mode = "down"
    daemon = build(tmp_path, clock, opencode)
    assert send(daemon, to="ses_nope", msg_id="msg_1") == (
        202, {"accepted": True, "msg_id": "msg_1", "thread": ANY, "target_checked": False}
    )  # fmt: skip
    stored = repo_of(daemon).get("msg_1")
    assert stored is not None and stored.state == "queued"


def test_delivery_off_accepts_unchecked(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """With delivery off there is no opencode to ask: 202, target_checked false, no call."""
    daemon = build(tmp_path, clock, opencode, opencode_url="")
    status, answer = send(daemon, to="ses_nope")
    assert (status, answer["target_checked"]) == (202, False)
    assert opencode.lookups == []


def test_channel_message_is_not_checked(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """A channel message has no target session: nothing asked, target_checked false."""
    daemon = build(tmp_path, clock, opencode)
    now_ms = int(clock.seconds() * 1000)
    repo_of(daemon).join_channel("builds", "ses_member", now_ms, 32)
    repo_of(daemon).set_policy("ses_member", Policy.HOLD, (), now_ms, None)  # its copy waits
    status, answer = send(daemon, to=None, channel="builds")
    assert (status, answer["target_checked"]) == (202, False)
    assert opencode.lookups == []


def test_retry_of_a_stored_message_is_answered_as_before_when_its_target_is_gone(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """A client that lost its 202 and retries after the target was deleted still gets 202
    (nothing stored twice), and different content under that msg_id still gets 409."""
    daemon = build(tmp_path, clock, opencode, registry_ttl_s=1)
    assert send(daemon, to="ses_other", msg_id="msg_1")[0] == 202
    opencode.sessions.discard("ses_other")
    clock.advance(2)
    assert send(daemon, to="ses_other", msg_id="msg_1") == (
        202, {"accepted": True, "msg_id": "msg_1", "thread": ANY, "target_checked": False}
    )  # fmt: skip
    assert send(daemon, to="ses_other", msg_id="msg_1", payload="other")[0] == 409


def test_a_refused_send_spends_no_flood_token(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """The check runs before the flood guard: a 404 leaves the sender's burst whole."""
    daemon = build(tmp_path, clock, opencode, sender_burst=1, sender_rate_per_s=0.001)
    assert send(daemon, to="ses_nope")[0] == 404
    assert send(daemon, to="ses_nope")[0] == 404
    assert send(daemon)[0] == 202


def test_no_answer_within_the_wait_accepts_unchecked_and_still_fills_the_cache(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """A lookup opencode does not answer within target_check_wait_s: the send goes on, unchecked;
    the answer that comes later is cached, so the next send is checked without a lookup."""
    opencode.mode = "hang"
    daemon = build(tmp_path, clock, opencode)
    api = StubTreq(daemon.site.resource)
    first = send_later(daemon, api, msg_id="msg_1")
    assert not first.called
    clock.advance(Config().target_check_wait_s)
    api.flush()
    assert result_of(first) == (
        202, {"accepted": True, "msg_id": "msg_1", "thread": ANY, "target_checked": False}
    )  # fmt: skip
    opencode.mode = "up"
    opencode.answer_held()
    assert send(daemon, msg_id="msg_2")[1]["target_checked"] is True
    assert opencode.lookups == ["ses_known"]


def test_a_reload_sets_how_long_a_send_waits_for_its_lookup(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """After a reload to target_check_wait_s 10, a send waits 10 s for opencode, not 3."""
    opencode.mode = "hang"
    daemon = build(tmp_path, clock, opencode)
    assert daemon.reload(replace(daemon.config, target_check_wait_s=10.0)) == []
    api = StubTreq(daemon.site.resource)
    waiting = send_later(daemon, api, msg_id="msg_1")
    clock.advance(9.9)
    api.flush()
    assert not waiting.called
    clock.advance(0.1)
    api.flush()
    assert result_of(waiting)[1]["target_checked"] is False


def test_sends_to_a_new_target_at_once_share_one_lookup(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """Three sends to a target not yet known, under way together, ask opencode once."""
    opencode.mode = "hang"
    daemon = build(tmp_path, clock, opencode)
    api = StubTreq(daemon.site.resource)
    sends = [send_later(daemon, api, msg_id=f"msg_{n}") for n in range(3)]
    opencode.mode = "up"
    opencode.answer_held()
    api.flush()
    assert [result_of(d)[1]["target_checked"] for d in sends] == [True, True, True]
    assert opencode.lookups == ["ses_known"]


def test_unknown_targets_fail_no_delivery_later(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """What was refused was never stored: the arbiter has nothing to fail a minute later."""
    daemon = build(tmp_path, clock, opencode)
    daemon.start_delivery()
    send(daemon, to="ses_nope", msg_id="msg_1")
    clock.advance(120)
    assert repo_of(daemon).count_by_state() == {}


def test_lookups_beyond_the_cap_accept_sends_unchecked_at_once(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """An opencode that never answers and ten sends to ten unknown targets together: at most
    max_session_lookups lookups are open at it; the sends beyond the cap get their 202
    (target_checked false) at once, the others once target_check_wait_s has passed."""
    opencode.mode = "hang"
    daemon = build(tmp_path, clock, opencode, max_session_lookups=3)
    api = StubTreq(daemon.site.resource)
    sends = [send_later(daemon, api, to=f"ses_new{n}", msg_id=f"msg_{n}") for n in range(10)]
    api.flush()
    assert len(opencode.held) == 3
    assert sum(d.called for d in sends) == 7
    clock.advance(Config().target_check_wait_s)
    api.flush()
    answers = [result_of(d) for d in sends]
    assert [(status, body["target_checked"]) for status, body in answers] == [(202, False)] * 10
    assert len(opencode.held) == 3


def test_hand_offs_to_unchecked_targets_wait_for_a_lookup_slot(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """The drains of the targets accepted unchecked look their sessions up through the same
    cap: an opencode that never answers still has at most max_session_lookups open."""
    opencode.mode = "hang"
    daemon = build(tmp_path, clock, opencode, max_session_lookups=3)
    daemon.start_delivery()
    api = StubTreq(daemon.site.resource)
    for n in range(10):
        send_later(daemon, api, to=f"ses_new{n}", msg_id=f"msg_{n}")
    for _ in range(5):
        clock.advance(1)
        api.flush()
    assert len(opencode.held) == 3
    assert repo_of(daemon).count_by_state() == {"queued": 10}


def test_sends_to_one_unknown_target_share_one_lookup_slot(
    tmp_path: Path, clock: Clock, opencode: SessionsOpencode
) -> None:
    """Sends to a target whose lookup is under way join it, taking no slot of their own:
    with the cap at 1, all five wait for that one lookup and are checked by its answer."""
    opencode.mode = "hang"
    daemon = build(tmp_path, clock, opencode, max_session_lookups=1)
    api = StubTreq(daemon.site.resource)
    sends = [send_later(daemon, api, msg_id=f"msg_{n}") for n in range(5)]
    api.flush()
    assert not any(d.called for d in sends)
    opencode.mode = "up"
    opencode.answer_held()
    api.flush()
    assert [result_of(d)[1]["target_checked"] for d in sends] == [True] * 5
    assert opencode.lookups == ["ses_known"]
