"""The permission watch's calls made of an opencode 2.x
(pigeond/delivery/opencode_v2_permissions.py): a 2.x request read as the watch reads a
1.x's, the 2.x routes asked, and the switch that asks them only of a server found to be
a 2.x.  The bodies are the v2 types' (npm ``@opencode-ai/sdk``), as the stand-in's, which
tests/test_opencode_v2_sdk_drift.py checks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet.defer import Deferred

from pigeond.delivery.opencode_client import OpencodeError
from pigeond.delivery.opencode_v2_permissions import (
    SwitchingPermissions,
    V2Permissions,
    one_x_entry,
)
from pigeond.delivery.permissions import Asked, asked_in
from tests.http_helpers import failure_of, result_of
from tests.opencode_v2_reads_helpers import found_2x
from tests.test_tool_call_reader import StubOpencode

DIRECTORY = "/home/user/project"
REQUEST = {
    "id": "per_1",
    "sessionID": "ses_a",
    "action": "bash",
    "resources": ["rm -rf build"],
    "save": ["rm *"],
    "metadata": {},
    "source": {"type": "tool", "messageID": "msg_step", "callID": "call_1"},
}
LISTED = {"location": {"directory": DIRECTORY, "project": {"id": "prj", "directory": "/"}},
          "data": [REQUEST]}  # fmt: skip


class FakeExchange:
    """The 2.x exchange: each path's answer, and what was asked."""

    def __init__(self, answers: dict[str, tuple[int, Any]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, str, Any]] = []

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None = None
    ) -> tuple[int, bytes]:
        self.asked.append((method, path, None if body is None else json.loads(body)))
        status, answer = self.answers[path.partition("?")[0]]
        return status, b"" if answer is None else json.dumps(answer).encode()


REPLY_PATH = "/api/session/ses_a/permission/per_1/reply"


def v2_of(exchange: FakeExchange) -> V2Permissions:
    return V2Permissions(exchange)  # type: ignore[arg-type]


def run(coroutine: Any) -> Deferred[Any]:
    return Deferred.fromCoroutine(coroutine)


def test_a_2x_request_is_read_as_a_1x_listing_s_entry() -> None:
    """The action, resources, what "always" keeps, and the asking call and step."""
    entry = one_x_entry(REQUEST)
    assert asked_in(entry, DIRECTORY) == Asked(
        "per_1", "ses_a", DIRECTORY, "bash", ("rm -rf build",), ("rm *",), "call_1", "msg_step"
    )


@pytest.mark.parametrize("missing", ["id", "sessionID", "action"])
def test_a_2x_request_without_its_id_session_or_action_is_none(missing: str) -> None:
    """Such a request could be neither recorded nor answered: left out."""
    assert one_x_entry({k: v for k, v in REQUEST.items() if k != missing}) is None


def test_the_pending_list_is_asked_at_the_directory() -> None:
    """``GET /api/permission/request`` with ``location[directory]``."""
    exchange = FakeExchange({"/api/permission/request": (200, LISTED)})
    listed = result_of(run(v2_of(exchange).pending(DIRECTORY)))
    assert [e["id"] for e in listed] == ["per_1"]
    assert exchange.asked == [
        ("GET", "/api/permission/request?location%5Bdirectory%5D=%2Fhome%2Fuser%2Fproject", None)
    ]


def test_an_answer_goes_to_the_listed_session_s_route() -> None:
    """The session is taken from the list; the reply is posted to its route: taken."""
    exchange = FakeExchange({"/api/permission/request": (200, LISTED), REPLY_PATH: (204, None)})
    assert result_of(run(v2_of(exchange).reply("per_1", DIRECTORY, "once"))) is True
    assert exchange.asked[-1] == ("POST", REPLY_PATH, {"reply": "once"})


def test_an_answer_to_a_request_no_longer_listed_is_gone() -> None:
    """Not in the list: nothing posted, False (the watch closes it as gone)."""
    exchange = FakeExchange({"/api/permission/request": (200, {**LISTED, "data": []})})
    assert result_of(run(v2_of(exchange).reply("per_1", DIRECTORY, "once"))) is False
    assert [a[0] for a in exchange.asked] == ["GET"]


@pytest.mark.parametrize(("status", "taken"), [(404, False), (500, None)])
def test_the_reply_route_s_refusals(status: int, taken: bool | None) -> None:
    """404 (not pending any more): False; any other failure: an OpencodeError."""
    error = {"_tag": "PermissionNotFoundError", "requestID": "per_1", "message": "gone"}
    exchange = FakeExchange({"/api/permission/request": (200, LISTED), REPLY_PATH: (status, error)})
    answered = run(v2_of(exchange).reply("per_1", DIRECTORY, "once"))
    if taken is None:
        assert failure_of(answered).check(OpencodeError)
    else:
        assert result_of(answered) is taken


class StubPermissions(StubOpencode):
    """A 1.x client's permission calls, failing as the stub's transcript read does
    (SpeaksV2 on a server found to be a 2.x)."""

    async def pending_permissions(self, directory: str) -> list[dict[str, Any]]:
        await self.messages("", directory)
        return []

    async def reply_permission(self, request_id: str, directory: str, reply: str) -> bool:
        await self.messages("", directory)
        return True


class Dialect:
    v2_version: str | None = None


def switching(v1: StubOpencode, exchange: FakeExchange) -> SwitchingPermissions:
    v1_side = StubPermissions(v1.answer)
    return SwitchingPermissions(v1_side, v2_of(exchange), Dialect())  # type: ignore[arg-type]


def test_a_1x_is_asked_its_own_routes_only() -> None:
    """A server answering as a 1.x: its calls, and nothing under /api/."""
    exchange = FakeExchange({})
    permissions = switching(StubOpencode([]), exchange)
    assert result_of(run(permissions.pending_permissions(DIRECTORY))) == []
    assert result_of(run(permissions.reply_permission("per_1", DIRECTORY, "once"))) is True
    assert exchange.asked == []


def test_a_server_found_to_be_a_2x_is_asked_its_2x_routes() -> None:
    """The 1.x call finds a 2.x (SpeaksV2): the 2.x routes are asked instead."""
    exchange = FakeExchange({"/api/permission/request": (200, LISTED), REPLY_PATH: (204, None)})
    permissions = switching(found_2x(), exchange)
    assert [e["id"] for e in result_of(run(permissions.pending_permissions(DIRECTORY)))] == [
        "per_1"
    ]
    assert result_of(run(permissions.reply_permission("per_1", DIRECTORY, "once"))) is True
