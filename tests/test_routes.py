"""The HTTP routes, in memory: StubTreq for the API, raw bytes for the body limit."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from unittest.mock import ANY

import pytest
from treq.client import HTTPClient
from twisted.internet.task import Clock
from twisted.web import server

from pigeond import __version__
from pigeond.api.routes import DeliveryHealth, SwarmRoutes
from pigeond.api.web import JsonApi, JsonResponse, make_site
from pigeond.config import Config
from pigeond.model import HandoffMode
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from testkit.messages import new_message
from tests.http_helpers import json_body, raw_exchange, result_of, stub_client
from tests.storage_helpers import accept_channel_alone

BASE = "http://pigeond.test"

RUNNING = DeliveryHealth(
    running=True, ticking=True, opencode="ok", event_stream="connected", in_flight=2, unrecorded=1
)


@dataclass
class Api:
    repo: SwarmRepository
    clock: Clock
    stub: HTTPClient
    kicked: list[str] = field(default_factory=list)

    def call(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        response = result_of(self.stub.request(method, BASE + path, data=data))
        content = result_of(response.content())
        return response.code, json.loads(content) if content else None

    def send(self, **fields: Any) -> tuple[int, Any]:
        body = {"from": "ses_sender", "to": "ses_target", "payload": "hi", **fields}
        return self.call("POST", "/swarm/send", {k: v for k, v in body.items() if v is not None})

    def deliver(self, msg_id: str) -> None:
        assert self.repo.mark_handed_off(msg_id, int(self.clock.seconds() * 1000))


@pytest.fixture
def api(repo: SwarmRepository, clock: Clock) -> Api:
    kicked: list[str] = []
    routes = SwarmRoutes(
        InlineDatabase(repo),
        clock,
        Config(),
        on_accepted=kicked.append,
        delivery_health=lambda: RUNNING,
    )
    return Api(repo, clock, stub_client(routes.install(JsonApi())), kicked)


def test_send_accepts_and_stores(api: Api) -> None:
    """A valid send answers 202 with the msg_id, and the row is stored queued."""
    status, body = api.send(msg_id="msg_abc")
    assert (status, body) == (
        202, {"accepted": True, "msg_id": "msg_abc", "thread": ANY, "target_checked": False}
    )  # fmt: skip
    stored = api.repo.get("msg_abc")
    assert stored is not None and stored.state == "queued" and stored.payload == "hi"


def test_send_applies_defaults(api: Api) -> None:
    """kind defaults to chat and priority to normal."""
    _, body = api.send()
    stored = api.repo.get(body["msg_id"])
    assert stored is not None and (stored.kind, stored.priority) == ("chat", "normal")


def test_generated_id_shape(api: Api) -> None:
    """A generated id is msg_<base36 ms timestamp>_<8 hex>, stamped with the clock's time."""
    _, body = api.send()
    match = re.fullmatch(r"msg_([0-9a-z]+)_([0-9a-f]{8})", body["msg_id"])
    assert match is not None
    assert int(match.group(1), 36) == int(api.clock.seconds() * 1000)


def test_send_kicks_the_target(api: Api) -> None:
    """A new direct message is handed to the arbiter at once."""
    api.send(to="ses_other")
    assert api.kicked == ["ses_other"]


def test_channel_message_without_members_is_409_not_stored(api: Api) -> None:
    """A channel message with no members would go to nobody: 409, nothing stored or kicked."""
    status, body = api.send(to=None, channel="builds", msg_id="msg_nobody")
    assert (status, body["channel"]) == (409, "builds")
    assert api.repo.get("msg_nobody") is None
    assert api.kicked == []


def test_unknown_fields_are_ignored(api: Api) -> None:
    """Fields the daemon does not know are ignored."""
    status, _ = api.send(color="blue")
    assert status == 202


def test_same_msg_id_same_content_is_idempotent(api: Api) -> None:
    """Re-sending the same msg_id and content answers 202 and writes nothing."""
    api.send(msg_id="msg_1")
    api.clock.advance(10)
    status, body = api.send(msg_id="msg_1")
    assert (status, body["msg_id"]) == (202, "msg_1")
    stored = api.repo.get("msg_1")
    assert stored is not None and stored.updated_at == stored.created_at
    assert api.kicked == ["ses_target"]


def test_defaults_count_as_same_content(api: Api) -> None:
    """A retry spelling out the defaults is the same content as one that left them out."""
    api.send(msg_id="msg_1")
    status, _ = api.send(msg_id="msg_1", kind="chat", priority="normal")
    assert status == 202


def test_same_msg_id_other_content_conflicts(api: Api) -> None:
    """Re-using a msg_id with other content answers 409 naming it and changes nothing."""
    api.send(msg_id="msg_1", payload="one")
    status, body = api.send(msg_id="msg_1", payload="two")
    assert status == 409
    assert body["msg_id"] == "msg_1" and "error" in body
    stored = api.repo.get("msg_1")
    assert stored is not None and stored.payload == "one"


@pytest.mark.parametrize(
    ("fields", "named"),
    [  # None removes the field from an otherwise valid body
        ({"from": None}, "from"),
        ({"from": ""}, "from"),
        ({"payload": None}, "payload"),
        ({"payload": ""}, "payload"),
        ({"to": None}, "to"),
        ({"channel": "builds"}, "channel"),
        ({"payload": 5}, "payload"),
        ({"to": ["ses_x"]}, "to"),
        ({"kind": "shout"}, "kind"),
        ({"kind": 1}, "kind"),
        ({"priority": "high"}, "priority"),
        ({"to": "session_1"}, "to"),
        ({"to": "ses_" + "a" * 129}, "to"),
        ({"to": "ses_a b"}, "to"),
        ({"from": "me too"}, "from"),
        ({"from": "x" * 129}, "from"),
        ({"msg_id": "m_1"}, "msg_id"),
        ({"msg_id": "msg_a:b"}, "msg_id"),
        ({"reply_to": "msg_"}, "reply_to"),
        ({"to": None, "channel": "Builds"}, "channel"),
        ({"to": None, "channel": "-x"}, "channel"),
        ({"to": None, "channel": "a" * 65}, "channel"),
    ],
)
def test_bad_field_is_400_naming_it(api: Api, fields: dict[str, Any], named: str) -> None:
    """A missing, mistyped or malformed field answers 400 with an error naming the field."""
    body = {"from": "ses_sender", "to": "ses_target", "payload": "hi", **fields}
    status, body = api.call("POST", "/swarm/send", {k: v for k, v in body.items() if v is not None})
    assert status == 400
    assert f"'{named}'" in body["error"]
    assert api.repo.count_by_state() == {}


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b'"text"', b"", b"\xff\xfe", b"{"])
def test_body_not_a_json_object_is_400(api: Api, raw: bytes) -> None:
    """A body that is not a JSON object answers 400 with a JSON error."""
    status, body = api.call("POST", "/swarm/send", raw=raw)
    assert status == 400 and isinstance(body["error"], str)


def test_deeply_nested_json_is_400(api: Api) -> None:
    """Pathologically nested JSON is a 400, not a crash."""
    status, _ = api.call("POST", "/swarm/send", raw=b"[" * 100_000)
    assert status == 400


def test_read_only_database_is_503(api: Api) -> None:
    """When the database refuses writes the send answers 503 and nothing is stored."""
    api.repo.connection.execute("PRAGMA query_only = 1")
    status, body = api.send(msg_id="msg_1")
    api.repo.connection.execute("PRAGMA query_only = 0")
    assert status == 503 and "error" in body
    assert api.repo.get("msg_1") is None and api.kicked == []


def test_full_disk_is_503(api: Api) -> None:
    """When the database cannot grow the send answers 503, never 202."""
    conn = api.repo.connection
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    statuses = {api.send(payload="x" * 8000)[0] for _ in range(50)}
    assert 503 in statuses
    accepted = api.repo.count_by_state().get("queued", 0)
    assert accepted == len(api.kicked)


def _deliver_n(api: Api, n: int, to: str = "ses_target") -> list[str]:
    ids = []
    for i in range(n):
        _, body = api.send(to=to, payload=f"m{i}")
        api.deliver(body["msg_id"])
        ids.append(body["msg_id"])
    return ids


def test_inbox_lists_handed_off_only(api: Api) -> None:
    """The inbox shows delivered messages with the seed's fields, not queued ones."""
    [delivered] = _deliver_n(api, 1)
    api.send(payload="still queued")
    status, body = api.call("GET", "/swarm/inbox?session=ses_target")
    assert status == 200
    assert [m["msg_id"] for m in body["messages"]] == [delivered]
    assert set(body["messages"][0]) == {
        "msg_id", "from", "to", "channel", "kind", "priority", "steer", "reply_to", "payload",
        "created_at", "handed_off_at", "verified_at", "from_name", "to_name", "channel_msg_id",
        "from_verified", "from_verified_note",
    }  # fmt: skip
    assert body["has_more"] is False


def test_inbox_pages_with_cursor(api: Api) -> None:
    """limit bounds a page; has_more and next_cursor lead to the rest, none skipped."""
    ids = _deliver_n(api, 5)
    _, first = api.call("GET", "/swarm/inbox?session=ses_target&limit=2")
    assert [m["msg_id"] for m in first["messages"]] == ids[:2] and first["has_more"]
    _, rest = api.call("GET", f"/swarm/inbox?session=ses_target&since={first['next_cursor']}")
    assert [m["msg_id"] for m in rest["messages"]] == ids[2:] and not rest["has_more"]


def test_inbox_since_msg_id(api: Api) -> None:
    """since=<msg_id> means after that message's hand-off, as in the seed."""
    ids = _deliver_n(api, 3)
    _, body = api.call("GET", f"/swarm/inbox?session=ses_target&since={ids[0]}")
    assert [m["msg_id"] for m in body["messages"]] == ids[1:]


def test_inbox_returns_late_hand_off_after_cursor(api: Api) -> None:
    """A message handed off after the reader's cursor passed is in the next read."""
    _, old = api.send(msg_id="msg_0000_old")
    [newer] = _deliver_n(api, 1)
    _, page = api.call("GET", "/swarm/inbox?session=ses_target")
    assert [m["msg_id"] for m in page["messages"]] == [newer]
    api.deliver(old["msg_id"])
    _, after = api.call("GET", f"/swarm/inbox?session=ses_target&since={page['next_cursor']}")
    assert [m["msg_id"] for m in after["messages"]] == ["msg_0000_old"]


def test_empty_page_keeps_the_cursor(api: Api) -> None:
    """On an empty page next_cursor is the cursor that was given."""
    _deliver_n(api, 1)
    _, page = api.call("GET", "/swarm/inbox?session=ses_target")
    cursor = page["next_cursor"]
    _, empty = api.call("GET", f"/swarm/inbox?session=ses_target&since={cursor}")
    assert (empty["messages"], empty["next_cursor"], empty["has_more"]) == ([], cursor, False)


def test_nothing_delivered_gives_null_cursor(api: Api) -> None:
    """next_cursor is null only when nothing was ever delivered to the session."""
    _, body = api.call("GET", "/swarm/inbox?session=ses_nobody")
    assert body == {"messages": [], "has_more": False, "next_cursor": None}


@pytest.mark.parametrize(
    "query",
    [
        "",
        "session=",
        "session=nope",
        "session=ses_a&session=ses_b",
        "session=ses_target&limit=0",
        "session=ses_target&limit=1001",
        "session=ses_target&limit=ten",
        "session=ses_target&limit=-1",
        "session=ses_target&since=cur_999",
        "session=ses_target&since=msg_unknown",
        "session=ses_target&since=garbage",
        "session=%ff",
    ],
)
def test_bad_inbox_query_is_400(api: Api, query: str) -> None:
    """A missing session, a bad limit or an unknown cursor answers 400 with an error."""
    status, body = api.call("GET", f"/swarm/inbox?{query}")
    assert status == 400 and isinstance(body["error"], str)


def test_cursor_of_another_session_is_400(api: Api) -> None:
    """A msg_id cursor must be a message handed off to the session that reads."""
    [other] = _deliver_n(api, 1, to="ses_other")
    status, _ = api.call("GET", f"/swarm/inbox?session=ses_target&since={other}")
    assert status == 400


def test_inbox_limit_max(api: Api) -> None:
    """limit=1000 is the largest page allowed."""
    status, _ = api.call("GET", "/swarm/inbox?session=ses_target&limit=1000")
    assert status == 200


def test_health(api: Api) -> None:
    """Health reports the version, delivery as the daemon sees it, and queued/failed counts."""
    api.send()
    accept_channel_alone(api.repo, new_message(channel="builds"), int(api.clock.seconds() * 1000))
    _, failed = api.send(**{"from": "cli-user"})
    api.repo.record_failed_attempt(failed["msg_id"], "x", 0, None)
    status, body = api.call("GET", "/health")
    assert status == 200
    assert body == {
        "ok": True, "version": __version__, "arbiter": True, "arbiter_ticking": True,
        "opencode": "ok", "event_stream": "connected", "in_flight": 2, "unrecorded": 1,
        "queued": 1, "failed": 1,
    }  # fmt: skip


def test_unknown_path_is_404_json(api: Api) -> None:
    """An unknown path answers 404 with a JSON error."""
    status, body = api.call("GET", "/swarm/nothing")
    assert status == 404 and "error" in body


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_segment_after_a_parameter_is_no_route(api: Api, method: str) -> None:
    """A parameter is one whole segment: a path with more after it is 404, not its route."""
    status, body = api.call(method, "/swarm/message/msg_1/x")
    assert status == 404 and "error" in body


def test_wrong_method_is_405_json(api: Api) -> None:
    """A known path with the wrong method answers 405 with a JSON error and Allow."""
    response = result_of(api.stub.request("DELETE", BASE + "/swarm/send"))
    assert response.code == 405
    assert response.headers.getRawHeaders("allow") == ["POST"]
    assert "error" in json.loads(result_of(response.content()))


def test_unexpected_error_is_500_without_traceback() -> None:
    """A handler bug answers a JSON 500 that holds no traceback, and serving goes on."""
    api = JsonApi()

    def broken(request: server.Request) -> JsonResponse:
        raise RuntimeError("secret internals")

    api.route("GET", "/broken", broken)
    api.route("GET", "/fine", lambda request: JsonResponse(200, {"ok": True}))
    stub = stub_client(api)
    response = result_of(stub.get(BASE + "/broken"))
    text = result_of(response.content()).decode()
    assert response.code == 500 and "secret" not in text and "Traceback" not in text
    assert result_of(stub.get(BASE + "/fine")).code == 200


def _site(repo: SwarmRepository, clock: Clock, limit: int) -> server.Site:
    return make_site(
        SwarmRoutes(InlineDatabase(repo), clock, Config()).install(JsonApi()),
        Config(max_body_bytes=limit),
    )


def _post_raw(body: bytes, *, chunked: bool = False) -> bytes:
    if chunked:
        return (
            b"POST /swarm/send HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + f"{len(body):x}\r\n".encode()
            + body
            + b"\r\n0\r\n\r\n"
        )
    return (
        b"POST /swarm/send HTTP/1.1\r\nHost: x\r\nContent-Length: "
        + str(len(body)).encode() + b"\r\n\r\n" + body
    )  # fmt: skip


def test_oversized_body_is_413(repo: SwarmRepository, clock: Clock) -> None:
    """A body over the configured limit answers 413 and stores nothing."""
    payload = json.dumps({"from": "ses_a", "to": "ses_b", "payload": "x" * 5000}).encode()
    status, _, body = raw_exchange(_site(repo, clock, 4096), _post_raw(payload))
    assert status == 413 and "4096" in json_body(body)["error"]
    assert repo.count_by_state() == {}


def test_oversized_chunked_body_is_413(repo: SwarmRepository, clock: Clock) -> None:
    """A chunked body that grows past the limit answers 413 too."""
    payload = json.dumps({"from": "ses_a", "to": "ses_b", "payload": "x" * 5000}).encode()
    status, _, _ = raw_exchange(_site(repo, clock, 4096), _post_raw(payload, chunked=True))
    assert status == 413


def test_body_at_limit_is_accepted(repo: SwarmRepository, clock: Clock) -> None:
    """A body just under the limit goes through our own Site and is accepted."""
    head = json.dumps({"from": "ses_a", "to": "ses_b", "payload": ""}).encode()
    payload = json.dumps({"from": "ses_a", "to": "ses_b", "payload": "x" * (4096 - len(head))})
    assert len(payload) == 4096
    status, headers, body = raw_exchange(_site(repo, clock, 4096), _post_raw(payload.encode()))
    assert status == 202 and headers["content-type"].startswith("application/json")
    assert repo.get(json_body(body)["msg_id"]) is not None


def test_ttl_sets_expiry(api: Api) -> None:
    """ttl_s puts the message's expiry that many seconds after acceptance."""
    _, body = api.send(ttl_s=90)
    stored = api.repo.get(body["msg_id"])
    assert stored is not None and stored.expires_at == stored.created_at + 90_000


def test_default_ttl(api: Api) -> None:
    """Without ttl_s a direct message expires after the default time to live (24 h)."""
    _, body = api.send()
    stored = api.repo.get(body["msg_id"])
    assert stored is not None and stored.expires_at == stored.created_at + 24 * 3600 * 1000


def test_channel_message_expires_like_a_direct_one(api: Api) -> None:
    """A channel message is given its expiry from ttl_s as a direct message is."""
    api.repo.join_channel("builds", "ses_member", int(api.clock.seconds() * 1000), 32)
    _, body = api.send(to=None, channel="builds", ttl_s=5)
    stored = api.repo.get(body["msg_id"])
    assert stored is not None and stored.expires_at == stored.created_at + 5000


@pytest.mark.parametrize("ttl", [0, -1, "60", True, 1.5, 31 * 24 * 3600])
def test_bad_ttl_is_400(api: Api, ttl: object) -> None:
    """ttl_s must be a whole number of seconds from 1 to 30 days."""
    status, body = api.send(ttl_s=ttl)
    assert status == 400 and "'ttl_s'" in body["error"]


def test_inbox_shows_verified_at(api: Api) -> None:
    """The inbox reports when each hand-off was found in the transcript."""
    _, sent = api.send()
    api.repo.mark_handed_off(sent["msg_id"], 1000, verify_by=61_000)
    api.repo.mark_verified([sent["msg_id"]], 1234)
    _, body = api.call("GET", "/swarm/inbox?session=ses_target")
    assert body["messages"][0]["verified_at"] == 1234


def test_message_status_carries_the_receipt_chain(api: Api) -> None:
    """answered_at is null until the reply is found; receipt says the stage reached."""
    assert api.send(msg_id="msg_1")[0] == 202
    api.repo.mark_handed_off("msg_1", 1000, verify_by=61_000)
    api.repo.mark_verified(["msg_1"], 1234)
    _, body = api.call("GET", "/swarm/message/msg_1")
    assert (body["receipt"], body["answered_at"], body["answer_message_id"]) == ("seen", None, None)
    api.repo.mark_answered({"msg_1": "msg_reply1"}, 5678)
    _, body = api.call("GET", "/swarm/message/msg_1")
    assert (body["receipt"], body["answered_at"], body["answer_message_id"]) == (
        "answered", 5678, "msg_reply1",
    )  # fmt: skip


def test_message_status(api: Api) -> None:
    """GET /swarm/message/<id> shows the message and its delivery state."""
    _, sent = api.send(msg_id="msg_1", payload="hello")
    api.repo.record_failed_attempt("msg_1", "HTTP 500", 1, 2)
    status, body = api.call("GET", "/swarm/message/msg_1")
    assert status == 200
    assert (body["msg_id"], body["payload"], body["state"]) == ("msg_1", "hello", "queued")
    assert (body["attempts"], body["last_error"], body["handed_off_at"]) == (1, "HTTP 500", None)
    assert body["verified_at"] is None and sent["msg_id"] == "msg_1"
    api.deliver("msg_1")
    _, delivered = api.call("GET", "/swarm/message/msg_1")
    assert delivered["state"] == "handed_off" and delivered["handed_off_at"] is not None


def test_message_status_says_what_it_was_handed_to(api: Api) -> None:
    """GET /swarm/message/<id> names the agent and model of the hand-off (null before it)."""
    api.send(msg_id="msg_1")
    assert api.call("GET", "/swarm/message/msg_1")[1]["handed_to"] is None
    mode = HandoffMode("plan", "fake", "fake-model-2", None, None)
    api.repo.mark_handed_off_many(["msg_1"], int(api.clock.seconds() * 1000), None, mode)
    _, body = api.call("GET", "/swarm/message/msg_1")
    assert body["handed_to"] == {
        "agent": "plan", "model": {"providerID": "fake", "modelID": "fake-model-2"},
        "variant": None, "note": None,
    }  # fmt: skip


def test_unknown_message_status_is_404(api: Api) -> None:
    """An unknown msg_id answers 404 with a JSON error naming it."""
    status, body = api.call("GET", "/swarm/message/msg_nope")
    assert status == 404 and body["msg_id"] == "msg_nope"


@pytest.mark.parametrize("path", ["/swarm/message/nope", "/swarm/message/msg_a%2Fb"])
def test_malformed_message_id_is_400(api: Api, path: str) -> None:
    """A path that is not a msg_id answers 400."""
    status, body = api.call("GET", path)
    assert status == 400 and "msg_id" in body["error"]


def test_message_status_needs_an_id(api: Api) -> None:
    """/swarm/message/ without an id is not a route."""
    status, _ = api.call("GET", "/swarm/message/")
    assert status == 404


@pytest.mark.parametrize(
    "sender", ["pigeond", "PigeonD", "pigeond.notice", "pigeond-x", "pigeond_y"]
)
def test_daemon_names_cannot_be_senders(api: Api, sender: str) -> None:
    """Nobody may send as pigeond: its failure notices cannot be forged."""
    status, body = api.send(**{"from": sender})
    assert status == 400 and "pigeond's own" in body["error"]
    assert api.repo.count_by_state() == {}


def test_names_merely_starting_with_pigeon_are_fine(api: Api) -> None:
    """Only the daemon's own names are reserved, not every name that looks like it."""
    assert api.send(**{"from": "pigeondfan"})[0] == 202
    assert api.send(**{"from": "pigeon"})[0] == 202


# -- the inbox's byte bound -----------------------------------------------------------

INBOX_BUDGET = 2048
# what an answer adds around its messages: {"messages": [...], "has_more": ..., "next_cursor": ...}
ANSWER_ENVELOPE_BYTES = 100


def _budget_routes(repo: SwarmRepository, clock: Clock) -> tuple[SwarmRoutes, Api]:
    routes = SwarmRoutes(InlineDatabase(repo), clock, Config(inbox_max_bytes=INBOX_BUDGET))
    return routes, Api(repo, clock, stub_client(routes.install(JsonApi())))


@pytest.fixture
def budget_api(repo: SwarmRepository, clock: Clock) -> Api:
    """The API with a 2 KiB inbox_max_bytes, so a few messages fill a page."""
    return _budget_routes(repo, clock)[1]


def _deliver_payloads(api: Api, payloads: list[str]) -> list[str]:
    ids = []
    for payload in payloads:
        _, body = api.send(payload=payload)
        api.deliver(body["msg_id"])
        ids.append(body["msg_id"])
    return ids


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


@pytest.mark.parametrize(
    ("limit", "payload", "count"),
    [(3, "hi", 3), (100, "p" * 500, 2), (1, "p" * 500, 1)],
    ids=["limit-first", "bytes-first", "both"],
)
def test_inbox_page_ends_at_the_first_bound_reached(
    budget_api: Api, limit: int, payload: str, count: int
) -> None:
    """A page ends at limit messages or inbox_max_bytes, whichever comes first; has_more is set."""
    ids = _deliver_payloads(budget_api, [payload] * 5)
    _, page = budget_api.call("GET", f"/swarm/inbox?session=ses_target&limit={limit}")
    assert [m["msg_id"] for m in page["messages"]] == ids[:count]
    assert page["has_more"] is True
    assert _json_bytes(page["messages"]) <= INBOX_BUDGET + ANSWER_ENVELOPE_BYTES


def test_oversized_message_comes_alone_and_the_cursor_moves_past_it(budget_api: Api) -> None:
    """A message over inbox_max_bytes is a page of its own; next_cursor leads past it."""
    ids = _deliver_payloads(budget_api, ["big" * 2000, "small"])
    _, first = budget_api.call("GET", "/swarm/inbox?session=ses_target")
    assert [m["msg_id"] for m in first["messages"]] == ids[:1] and first["has_more"]
    since = first["next_cursor"]
    _, rest = budget_api.call("GET", f"/swarm/inbox?session=ses_target&since={since}")
    assert [m["msg_id"] for m in rest["messages"]] == ids[1:] and not rest["has_more"]


def test_following_next_cursor_visits_every_message_once(budget_api: Api) -> None:
    """Paging by next_cursor while has_more visits every message once, in order, each
    answer bounded by limit and (but for a lone oversized message) inbox_max_bytes."""
    sizes = [10, 900, 3000, 10, 10, 500, 5000, 700, 10, 2000, 1, 999, 10, 10, 10, 10]
    ids = _deliver_payloads(budget_api, ["p" * n for n in sizes])
    seen: list[str] = []
    query = "session=ses_target&limit=3"
    while True:
        status, page = budget_api.call("GET", f"/swarm/inbox?{query}")
        assert status == 200 and 1 <= len(page["messages"]) <= 3
        if len(page["messages"]) > 1:
            assert _json_bytes(page) <= INBOX_BUDGET + ANSWER_ENVELOPE_BYTES
        seen += [m["msg_id"] for m in page["messages"]]
        if not page["has_more"]:
            break
        query = f"session=ses_target&limit=3&since={page['next_cursor']}"
    assert seen == ids


def test_inbox_byte_bound_can_change_while_running(repo: SwarmRepository, clock: Clock) -> None:
    """A new inbox_max_bytes (a reload) bounds the next page."""
    routes, api = _budget_routes(repo, clock)
    _deliver_payloads(api, ["p" * 600] * 5)
    routes.inbox_max_bytes = 64 * 1024
    _, page = api.call("GET", "/swarm/inbox?session=ses_target")
    assert len(page["messages"]) == 5 and not page["has_more"]


def test_answers_do_not_name_the_server_software(repo: SwarmRepository, clock: Clock) -> None:
    """The Server header says pigeond, not TwistedWeb and its version."""
    site = make_site(
        SwarmRoutes(InlineDatabase(repo), clock, Config()).install(JsonApi()),
        Config(max_body_bytes=1024),
    )
    _, headers, _ = raw_exchange(site, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert headers["server"] == "pigeond"
