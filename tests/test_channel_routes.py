"""Channels over HTTP: join, leave, listings, history, and what a channel send answers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
from treq.client import HTTPClient
from twisted.internet.task import Clock

from pigeond.api.channels import ChannelRoutes
from pigeond.api.routes import SwarmRoutes
from pigeond.api.web import JsonApi
from pigeond.config import Config
from pigeond.consent import Policy
from pigeond.service.daemon import Daemon
from pigeond.storage import SwarmRepository
from pigeond.storage.channels import DEFAULT_MAX_CHANNEL_MEMBERS
from pigeond.storage.database import InlineDatabase
from tests.authority_helpers import as_person, person_authority
from tests.http_helpers import daemon_call, result_of, stub_client
from tests.openapi_check import check_body
from tests.storage_helpers import clock_daemon, repo_of

pytestmark = pytest.mark.both_backends

BASE = "http://pigeond.test"
A, B, C, D = "ses_alice", "ses_bob", "ses_carol", "ses_dave"
TEAM = "team.backend"
MEMBERS = f"/swarm/channels/{TEAM}/members"


@dataclass
class FakeLiveness:
    """opencode as the join asks it: every session exists but those in ``gone``."""

    gone: set[str] = field(default_factory=set)
    invalidated: list[str] = field(default_factory=list)

    def invalidate(self, session_id: str) -> None:
        self.invalidated.append(session_id)

    async def exists(self, session_id: str) -> bool | None:
        return session_id not in self.gone


@dataclass
class Rig:
    """The send and channel routes on one API in memory; every answer is held to the
    OpenAPI document."""

    repo: SwarmRepository
    clock: Clock
    stub: HTTPClient
    liveness: FakeLiveness
    kicked: list[str]

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> Any:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        response = result_of(self.stub.request(method, BASE + path, data=data))
        content = result_of(response.content())
        headers = {
            k.decode().lower(): v[0].decode() for k, v in response.headers.getAllRawHeaders()
        }
        check_body(method, path.split("?")[0], response.code, headers, content)
        return response.code, json.loads(content)

    def join(self, session: str, channel: str = TEAM) -> Any:
        return self.call("POST", f"/swarm/channels/{channel}/members", {"session": session})

    def send(self, **fields: Any) -> Any:
        body = {"from": A, "channel": TEAM, "payload": "standup in 5", **fields}
        return self.call("POST", "/swarm/send", body)

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)


@pytest.fixture
def rig(repo: SwarmRepository, clock: Clock) -> Rig:
    """At most 3 members a channel; opencode has every session unless told otherwise."""
    db, liveness = InlineDatabase(repo), FakeLiveness()
    kicked: list[str] = []
    config = Config(max_channel_members=3)
    api = SwarmRoutes(db, clock, config, on_accepted=kicked.append).install(JsonApi())
    ChannelRoutes(db, clock, config, person_authority(clock), liveness).install(api)
    return Rig(repo, clock, stub_client(api), liveness, kicked)


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Daemon:
    """The daemon as wired, delivery off, with one member a channel and one queued message
    a target."""
    config = Config(
        db=str(tmp_path / "p.db"), opencode_url="", max_channel_members=1, max_queued_per_target=1
    )
    return as_person(clock_daemon(config, clock))


# -- joining and leaving --------------------------------------------------------------------


def test_a_session_joins_and_is_listed_with_its_name(rig: Rig) -> None:
    """201 with the member count; the channel lists its members, names and the limit."""
    rig.repo.claim_name("reviewer", B, rig.now_ms())
    assert rig.join(A) == (201, {"channel": TEAM, "session": A, "joined": True, "members": 1})
    assert rig.join(B)[1]["members"] == 2
    assert rig.call("GET", f"/swarm/channels/{TEAM}") == (
        200,
        {
            "channel": TEAM,
            "members": [
                {"session": A, "name": None, "joined_at": rig.now_ms()},
                {"session": B, "name": "reviewer", "joined_at": rig.now_ms()},
            ],
            "max_members": 3,
        },
    )


def test_joining_again_answers_200_and_changes_nothing(rig: Rig) -> None:
    """A member joining again is a 200 with joined false."""
    rig.join(A)
    assert rig.join(A) == (200, {"channel": TEAM, "session": A, "joined": False, "members": 1})


def test_a_full_channel_refuses_the_next_join_with_409(rig: Rig) -> None:
    """Past max_channel_members a join is a 409 that names the option; nobody is added."""
    for member in (A, B, C):
        rig.join(member)
    assert rig.join(D) == (
        409,
        {"error": f"channel {TEAM} is full: it has its most members (3, max_channel_members)"},
    )
    assert [m.session for m in rig.repo.channel_members(TEAM)] == [A, B, C]


def test_a_member_leaves(rig: Rig) -> None:
    """DELETE ends the membership and says so."""
    rig.join(A)
    rig.join(B)
    assert rig.call("DELETE", f"{MEMBERS}/{A}") == (
        200, {"channel": TEAM, "session": A, "left": True}
    )  # fmt: skip
    assert [m.session for m in rig.repo.channel_members(TEAM)] == [B]


def test_leaving_a_channel_one_is_not_a_member_of_is_404(rig: Rig) -> None:
    """A session that is not a member cannot leave: 404 naming it and the channel."""
    assert rig.call("DELETE", f"{MEMBERS}/{A}") == (
        404, {"error": f"{A} is not a member of {TEAM}"}
    )  # fmt: skip


def test_a_name_joins_as_the_session_holding_it(rig: Rig) -> None:
    """{"session": "@reviewer"} joins the session that holds the name now."""
    rig.repo.claim_name("reviewer", B, rig.now_ms())
    assert rig.join("@reviewer") == (
        201, {"channel": TEAM, "session": B, "joined": True, "members": 1}
    )  # fmt: skip


def test_a_name_nobody_holds_cannot_join(rig: Rig) -> None:
    """An unheld @name is a 404 and nobody joins."""
    assert rig.join("@ghost") == (
        404, {"error": "nobody holds the name @ghost (see GET /swarm/names)"}
    )  # fmt: skip
    assert rig.repo.channel_members(TEAM) == []


def test_a_session_opencode_does_not_have_cannot_join(rig: Rig) -> None:
    """opencode is asked afresh; a session it does not have is a 404 and does not join."""
    rig.liveness.gone.add(C)
    status, body = rig.join(C)
    assert (status, body["error"]) == (404, f"no session {C} in opencode: it cannot join {TEAM}")
    assert rig.liveness.invalidated == [C]
    assert rig.repo.channel_members(TEAM) == []


@pytest.mark.parametrize(
    ("method", "path", "body", "error"),
    [
        ("POST", "/swarm/channels/Team/members", {"session": A}, "the channel in the path"),
        ("POST", "/swarm/channels/-x/members", {"session": A}, "the channel in the path"),
        ("POST", MEMBERS, {"session": "alice"}, "field 'session' is required"),
        ("POST", MEMBERS, {}, "field 'session' is required"),
        ("POST", MEMBERS, {"session": 7}, "field 'session' is required"),
        ("POST", MEMBERS, {"session": "@Bad"}, "field 'session' must be a name"),
        ("POST", MEMBERS, {"session": "@pigeond"}, "pigeond's own"),
        ("POST", MEMBERS, [A], "body must be a JSON object"),
        ("DELETE", f"{MEMBERS}/alice", None, "the session in the path"),
        ("GET", "/swarm/channels/" + "a" * 65, None, "the channel in the path"),
        ("GET", "/swarm/channels?session=alice", None, "query parameter 'session'"),
        ("GET", "/swarm/channel/UP", None, "the channel in the path"),
    ],
)
def test_a_bad_channel_session_or_body_is_a_400(
    rig: Rig, method: str, path: str, body: Any, error: str
) -> None:
    """Each malformed request is refused with a 400 that says what is wrong."""
    status, answer = rig.call(method, path, body)
    assert status == 400 and error in answer["error"], answer


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("POST", f"/swarm/channels/{TEAM}", "GET"),
        ("GET", MEMBERS, "POST"),
        ("PUT", f"{MEMBERS}/{A}", "DELETE"),
        ("OPTIONS", f"/swarm/channel/{TEAM}", "GET"),
    ],
)
def test_a_method_a_channel_route_does_not_take_is_405_naming_its_own(
    rig: Rig, method: str, path: str, allow: str
) -> None:
    """Each shape of path answers 405 with the methods of that shape alone."""
    response = result_of(rig.stub.request(method, BASE + path, data=b"{}"))
    assert (response.code, response.headers.getRawHeaders("allow")) == (405, [allow])


@pytest.mark.parametrize("path", [f"{MEMBERS}/{A}/x", f"/swarm/channel/{TEAM}/x", MEMBERS + "/"])
def test_a_path_of_another_shape_is_no_route(rig: Rig, path: str) -> None:
    """A path under the channel routes that none of them takes is a 404."""
    assert rig.call("DELETE", path) == (404, {"error": "no such route"})


# -- listings -------------------------------------------------------------------------------


def test_channels_are_listed_and_filtered_by_session(rig: Rig) -> None:
    """GET /swarm/channels lists every channel with members; ?session= those it is in."""
    rig.join(A)
    rig.join(B)
    rig.join(B, "ops")
    rig.send()
    ops = {"channel": "ops", "members": 1, "last_message_at": None}
    team = {"channel": TEAM, "members": 2, "last_message_at": rig.now_ms()}
    assert rig.call("GET", "/swarm/channels") == (200, {"channels": [ops, team]})
    assert rig.call("GET", f"/swarm/channels?session={A}") == (200, {"channels": [team]})
    assert rig.call("GET", f"/swarm/channels?session={C}") == (200, {"channels": []})


def test_an_empty_channel_has_no_members(rig: Rig) -> None:
    """A channel nobody joined answers an empty member list, not a 404."""
    assert rig.call("GET", "/swarm/channels/quiet") == (
        200, {"channel": "quiet", "members": [], "max_members": 3}
    )  # fmt: skip


# -- history --------------------------------------------------------------------------------


def test_the_history_pages_with_a_cursor(rig: Rig) -> None:
    """Pages of the channel's messages, oldest first, as the inbox pages."""
    rig.join(B)
    sent = [rig.send(payload=f"note {i}")[1]["msg_id"] for i in range(3)]
    status, first = rig.call("GET", f"/swarm/channel/{TEAM}?limit=2")
    assert status == 200 and first["has_more"] is True
    assert [m["msg_id"] for m in first["messages"]] == sent[:2]
    assert {m["to"] for m in first["messages"]} == {None}
    _, second = rig.call("GET", f"/swarm/channel/{TEAM}?since={first['next_cursor']}")
    assert [m["msg_id"] for m in second["messages"]] == sent[2:]
    assert second["has_more"] is False
    last = second["next_cursor"]
    assert rig.call("GET", f"/swarm/channel/{TEAM}?since={last}") == (
        200, {"messages": [], "has_more": False, "next_cursor": last}
    )  # fmt: skip


def test_the_history_of_a_channel_without_messages_is_empty(rig: Rig) -> None:
    """No message yet: an empty page whose next cursor is null."""
    assert rig.call("GET", f"/swarm/channel/{TEAM}") == (
        200, {"messages": [], "has_more": False, "next_cursor": None}
    )  # fmt: skip


@pytest.mark.parametrize("query", ["since=cur_999", "since=msg_1", "since=x", "limit=0"])
def test_the_history_refuses_a_cursor_it_never_gave(rig: Rig, query: str) -> None:
    """A cursor past the last accept number, one of another shape, or a bad limit: 400."""
    rig.join(B)
    rig.send()
    status, body = rig.call("GET", f"/swarm/channel/{TEAM}?{query}")
    assert status == 400 and ("cursor" in body["error"] or "'limit'" in body["error"])


# -- sends to a channel ---------------------------------------------------------------------


def test_a_channel_send_answers_each_copy_and_kicks_its_member(rig: Rig) -> None:
    """The 202 lists each member's copy (held or not) and who was left out; each copy's
    member is kicked; the sender gets none."""
    for member in (A, B, C, D):
        rig.repo.join_channel(TEAM, member, rig.now_ms(), 32)
    rig.repo.set_policy(C, Policy.HOLD, (), rig.now_ms(), None)
    rig.repo.set_policy(D, Policy.REFUSE, (), rig.now_ms(), None)
    status, body = rig.send(msg_id="msg_ch1")
    copies = {d.to_session: d.msg_id for d in rig.repo.fan_out_of("msg_ch1").deliveries}
    assert (status, body) == (
        202,
        {
            "accepted": True, "msg_id": "msg_ch1", "thread": ANY, "target_checked": False,
            "deliveries": [
                {"to": B, "msg_id": copies[B], "held": False},
                {"to": C, "msg_id": copies[C], "held": True},
            ],
            "skipped": [{"session": D, "reason": "its inbound policy is refuse"}],
        },
    )  # fmt: skip
    assert rig.kicked == [B, C]


def test_a_retried_channel_send_answers_the_same_and_kicks_nobody(rig: Rig) -> None:
    """The same msg_id again: the same copies in the 202, nothing stored, nobody kicked."""
    rig.join(B)
    first = rig.send(msg_id="msg_ch2")
    rig.kicked.clear()
    assert rig.send(msg_id="msg_ch2") == first
    assert rig.kicked == []
    assert len(rig.repo.fan_out_of("msg_ch2").deliveries) == 1


def test_channel_copies_expire_with_the_send(rig: Rig) -> None:
    """ttl_s gives the channel message and every copy the same expiry."""
    rig.join(B)
    rig.join(C)
    rig.send(msg_id="msg_ch3", ttl_s=60)
    channel = rig.repo.get("msg_ch3")
    assert channel is not None and channel.expires_at == rig.now_ms() + 60_000
    copies = rig.repo.fan_out_of("msg_ch3").deliveries
    assert [c.expires_at for c in copies] == [rig.now_ms() + 60_000] * 2


def test_the_status_of_a_channel_message_follows_each_copy(rig: Rig) -> None:
    """GET /swarm/message of a channel message adds each copy's state and receipt, and
    who was left out."""
    rig.join(B)
    rig.join(C)
    rig.repo.set_policy(C, Policy.REFUSE, (), rig.now_ms(), None)
    rig.send(msg_id="msg_ch4")
    (copy,) = rig.repo.fan_out_of("msg_ch4").deliveries
    assert rig.repo.mark_handed_off(copy.msg_id, rig.now_ms())
    status, body = rig.call("GET", "/swarm/message/msg_ch4")
    assert (status, body["state"]) == (200, "fanned_out")
    assert body["deliveries"] == [
        {"to": B, "msg_id": copy.msg_id, "state": "handed_off", "receipt": "handed_off"}
    ]
    assert body["skipped"] == [{"session": C, "reason": "its inbound policy is refuse"}]


def test_a_direct_message_s_status_has_no_deliveries(rig: Rig) -> None:
    """Only a channel message's status lists copies."""
    rig.call("POST", "/swarm/send", {"from": A, "to": B, "payload": "hi", "msg_id": "msg_d1"})
    _, body = rig.call("GET", "/swarm/message/msg_d1")
    assert "deliveries" not in body and "skipped" not in body


# -- the daemon -----------------------------------------------------------------------------


def test_a_member_at_its_queue_cap_is_skipped_not_refused(daemon: Daemon) -> None:
    """With max_queued_per_target reached for one member, a channel send is still a 202
    for the others and that member is left out, named with its cap."""
    assert daemon.reload(replace(daemon.config, max_channel_members=2)) == []
    for member in (B, C):
        assert daemon_call(daemon, "POST", MEMBERS, {"session": member})[0] == 201
    daemon_call(daemon, "POST", "/swarm/send", {"from": A, "to": B, "payload": "first"})
    status, body = daemon_call(
        daemon, "POST", "/swarm/send", {"from": A, "channel": TEAM, "payload": "x"}
    )
    assert (status, [d["to"] for d in body["deliveries"]]) == (202, [C])
    assert body["skipped"] == [{"session": B, "reason": "its queue holds 1 messages"}]


def test_a_channel_send_no_member_can_take_is_409_and_not_stored(daemon: Daemon) -> None:
    """Every member at its max_queued_per_target: 409 naming the channel, nothing stored."""
    assert daemon_call(daemon, "POST", MEMBERS, {"session": B})[0] == 201
    daemon_call(daemon, "POST", "/swarm/send", {"from": A, "to": B, "payload": "first"})
    status, body = daemon_call(
        daemon, "POST", "/swarm/send",
        {"from": A, "channel": TEAM, "payload": "x", "msg_id": "msg_nobody"},
    )  # fmt: skip
    assert (status, body["channel"]) == (409, TEAM)
    assert "max_queued_per_target" in body["error"] and "nothing stored" in body["error"]
    assert repo_of(daemon).get("msg_nobody") is None


def test_max_channel_members_is_reloaded(daemon: Daemon) -> None:
    """A reload's max_channel_members applies from the next join on."""
    assert daemon_call(daemon, "POST", MEMBERS, {"session": A})[0] == 201
    assert daemon_call(daemon, "POST", MEMBERS, {"session": B})[0] == 409
    assert daemon.reload(replace(daemon.config, max_channel_members=2)) == []
    assert daemon_call(daemon, "POST", MEMBERS, {"session": B})[0] == 201
    status, body = daemon_call(daemon, "GET", f"/swarm/channels/{TEAM}")
    assert (status, body["max_members"]) == (200, 2)
    assert [m.session for m in repo_of(daemon).channel_members(TEAM)] == [A, B]


def test_the_history_is_bounded_in_bytes_as_the_inbox_is(rig: Rig) -> None:
    """A page holds at most inbox_max_bytes of messages, but always its first one."""
    rig.join(B)
    for i in range(3):
        rig.send(msg_id=f"msg_big{i}", payload=f"{i}" * 700)
    page = rig.repo.channel_history_page(TEAM, 0, 10, 1024)
    assert ([m.msg_id for m in page.messages], page.has_more) == (["msg_big0"], True)
    page = rig.repo.channel_history_page(TEAM, 0, 10, 10)
    assert ([m.msg_id for m in page.messages], page.has_more) == (["msg_big0"], True)
    page = rig.repo.channel_history_page(TEAM, 0, 10, 1_000_000)
    assert (len(page.messages), page.has_more) == (3, False)


def test_the_default_member_limit_is_the_storage_s() -> None:
    """max_channel_members defaults to the limit storage assumes without configuration."""
    assert Config().max_channel_members == DEFAULT_MAX_CHANNEL_MEMBERS
