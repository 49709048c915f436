"""The 2.x stand-in's routes and bodies match the v2 types published in npm
``@opencode-ai/sdk`` (pinned in tests/opencode_sdk_types.py), so drift between them fails."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from testkit.opencode_v2_standin import PROMPT_FIELDS, ROUTES, OpencodeV2StandIn
from tests.opencode_sdk_types import SdkTypes, body_drift, ensure_sdk_types
from tests.opencode_v2_calls import (
    PASSWORD,
    call,
    open_events,
    prompt,
    read_events,
    running,
    wait_idle,
)

V2_TOOL_CALLS = Path(__file__).parent / "fixtures" / "opencode" / "v2-tool-calls.json"
RELEASED_AFTER_SDK = {
    ("GET", "/api/info"),
    ("POST", "/api/session/{sessionID}/synthetic"),
    ("GET", "/api/session/{sessionID}/inbox"),
    ("DELETE", "/api/session/{sessionID}/inbox/{inboxID}"),
    ("PATCH", "/api/session/{sessionID}/inbox/{inboxID}"),
}
"""Routes of the released 2.3.0 protocol that the pinned SDK does not declare yet."""
HEALTH_RELEASED_FIELDS = ("version", "pid")
"""What the released protocol's health answer adds to the pinned SDK's ``{healthy}``."""


@pytest.fixture(scope="module")
def sdk() -> SdkTypes:
    return ensure_sdk_types()


def test_every_route_is_a_route_of_the_sdk(sdk: SdkTypes) -> None:
    """Each stand-in route is declared by the SDK with its method, unless it is one the
    SDK does not have yet (and then the SDK has no route at that path at all)."""
    declared = {(op.method, op.url) for op in sdk.operations}
    sdk_urls = {op.url for op in sdk.operations}
    for method, template, _ in ROUTES:
        if (method, template) in RELEASED_AFTER_SDK:
            assert template not in sdk_urls, f"the SDK now declares {template}: check it"
        else:
            assert (method, template) in declared, (method, template)


def test_request_bodies_are_the_sdk_bodies(sdk: SdkTypes) -> None:
    """The body fields the stand-in accepts are the ones the SDK declares, and the prompt's
    text is where the SDK puts it."""
    standin = OpencodeV2StandIn(PASSWORD)
    for method, template, name in ROUTES:
        if name in standin.request_fields and (method, template) not in RELEASED_AFTER_SDK:
            declared = sdk.body(sdk.operation(method, template))
            assert body_drift(declared, standin.request_fields[name]) == [], template
    prompt_data = sdk.operation("POST", "/api/session/{sessionID}/prompt").data + "Data"
    assert sdk.fields(sdk.member(sdk.member(prompt_data, "body"), "prompt"))["text"] is True


def test_answers_conform_to_the_sdk_types(sdk: SdkTypes) -> None:
    """Every answer of a session's life (health, session, admission, conflict, refusals,
    activity, wait, transcript, events) has the fields the SDK declares, and no other."""
    answers: list[tuple[str, str, int, Any]] = []

    def record(method: str, template: str, path: str, body: Any = None, **kw: Any) -> None:
        status, answer = call(url, method, path, body, **kw)
        answers.append((method, template, status, answer))

    session_path = "/api/session/{sessionID}"
    prompt_path = session_path + "/prompt"
    with running(step_s=0.3) as (url, session):
        events = open_events(url)
        here = f"/api/session/{session.id}"
        record("GET", session_path, here)
        record("GET", session_path, "/api/session/ses_missing")
        record("POST", prompt_path, here + "/prompt", {"prompt": {"text": "hi"}, "id": "msg_1"})
        record("GET", "/api/session/active", "/api/session/active")
        record("POST", prompt_path, here + "/prompt", {"prompt": {"text": "no"}, "id": "msg_1"})
        record("POST", prompt_path, here + "/prompt", {"prompt": {"text": "x"}, "bogus": 1})
        record("POST", prompt_path, here + "/prompt", {"prompt": {"text": "x"}}, password=None)
        record("POST", session_path + "/wait", here + "/wait")
        record("GET", "/api/session/active", "/api/session/active")
        record("GET", session_path + "/message", here + "/message?order=asc")
        record("POST", "/api/session", "/api/session", {})
        status, health = call(url, "GET", "/api/health")
        streamed = read_events(events, count=4)
    assert [a[2] for a in answers] == [200, 404, 200, 200, 409, 400, 401, 204, 200, 200, 200]
    for method, template, status, answer in answers:
        declared = sdk.answer(sdk.operation(method, template), status)
        if answer is None:
            assert declared == "void", (template, status)
        else:
            assert sdk.errors(answer, declared) == [], (template, status, answer)
    assert status == 200
    assert (
        sdk.errors(
            {k: v for k, v in health.items() if k not in HEALTH_RELEASED_FIELDS},
            sdk.answer(sdk.operation("GET", "/api/health"), 200),
        )
        == []
    )
    event_type = sdk.answer(sdk.operation("GET", "/api/event"), 200)
    assert [e["type"] for e in streamed] == [
        "server.connected",
        "session.next.prompt.admitted",
        "session.status",
        "session.idle",
    ]
    for event in streamed:
        assert sdk.errors(event, event_type) == [], event


def test_a_tool_call_in_the_transcript_conforms_to_the_sdk_types(sdk: SdkTypes) -> None:
    """A turn whose model calls a tool: its transcript while the tool runs (the part
    ``running``) and after it returned (``completed``), and the 2.x tool-call fixture, have
    the fields the SDK declares."""
    declared = sdk.answer(sdk.operation("GET", "/api/session/{sessionID}/message"), 200)
    here = "/api/session/{}/message?order=asc"
    with running() as (url, session):
        with session.turns_held():
            prompt(url, session.id, "name yourself")
            with session.tool_running("swarm_name", {"name": "reviewer"}) as call_id:
                during = call(url, "GET", here.format(session.id))[1]
            after = call(url, "GET", here.format(session.id))[1]
        wait_idle(url, session)
    parts = [m["content"][0] for m in (during["data"][-1], after["data"][-1])]
    assert [(p["id"], p["name"], p["state"]["status"]) for p in parts] == [
        (call_id, "swarm_name", "running"),
        (call_id, "swarm_name", "completed"),
    ]
    fixture = json.loads(V2_TOOL_CALLS.read_text("utf-8"))
    for answer in (during, after, {"data": fixture, "cursor": {}}):
        assert sdk.errors(answer, declared) == [], answer


def test_permission_events_conform_to_the_sdk_types(sdk: SdkTypes) -> None:
    """A permission asked and answered is told on the event stream as the SDK's
    ``permission.v2.asked`` and ``permission.v2.replied``."""
    event_type = sdk.answer(sdk.operation("GET", "/api/event"), 200)
    server = OpencodeV2StandIn(PASSWORD)
    with server.serve() as url:
        session = server.create_session()
        events = open_events(url)
        request_id = server.ask_permission(session, "bash", ["rm -rf build"], "call_1")
        reply = f"/api/session/{session.id}/permission/{request_id}/reply"
        call(url, "POST", reply, {"reply": "once"})
        streamed = read_events(events, count=3)
    assert [e["type"] for e in streamed] == [
        "server.connected",
        "permission.v2.asked",
        "permission.v2.replied",
    ]
    assert streamed[1]["data"]["id"] == streamed[2]["data"]["requestID"] == request_id
    for event in streamed:
        assert sdk.errors(event, event_type) == [], event


def test_permission_answers_conform_to_the_sdk_types(sdk: SdkTypes) -> None:
    """A permission request listed at its directory, answered (204), answered again (404):
    each answer has the fields the SDK declares."""
    list_op = sdk.operation("GET", "/api/permission/request")
    reply_op = sdk.operation("POST", "/api/session/{sessionID}/permission/{requestID}/reply")
    server = OpencodeV2StandIn(PASSWORD)
    with server.serve() as url:
        session = server.create_session()
        request_id = server.ask_permission(session, "bash", ["rm -rf build"], "call_1")
        where = f"/api/permission/request?location%5Bdirectory%5D={session.directory}"
        listed = call(url, "GET", where)
        reply = f"/api/session/{session.id}/permission/{request_id}/reply"
        taken = call(url, "POST", reply, {"reply": "once"})
        again = call(url, "POST", reply, {"reply": "once"})
    assert [r["id"] for r in listed[1]["data"]] == [request_id]
    assert (taken[0], again[0]) == (204, 404)
    assert sdk.errors(listed[1], sdk.answer(list_op, 200)) == []
    assert sdk.answer(reply_op, 204) == "void"
    assert sdk.errors(again[1], sdk.answer(reply_op, 404)) == [], again


def test_an_undeclared_or_missing_field_is_drift(sdk: SdkTypes) -> None:
    """The check fails on an answer with a field the SDK does not declare or without a
    required one, and on a body field accepted but not declared (or declared, not accepted)."""
    prompt_op = sdk.operation("POST", "/api/session/{sessionID}/prompt")
    with running() as (url, session):
        receipt = {"data": prompt(url, session.id, "hello")}
        wait_idle(url, session)
    declared = sdk.answer(prompt_op, 200)
    assert sdk.errors(receipt, declared) == []
    extra = copy.deepcopy(receipt)
    extra["data"]["bogus"] = 1
    assert sdk.errors(extra, declared) == ["$.data.bogus: not declared"]
    del extra["data"]["bogus"], extra["data"]["admittedSeq"]
    assert sdk.errors(extra, declared) == ["$.data.admittedSeq: required, missing"]
    body = sdk.body(prompt_op)
    accepted = PROMPT_FIELDS["nested"]
    assert body_drift(body, accepted | {"text"}) == ["text: accepted, not declared"]
    assert body_drift(body, accepted - {"resume"}) == ["resume: declared, not accepted"]
