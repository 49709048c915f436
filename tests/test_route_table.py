"""The routing table: paths with named parameters, each handed to its handler by name."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.task import Clock

from pigeond.api.route_table import RouteTable
from pigeond.api.web import HttpError, JsonApi, JsonResponse, make_site, path_params
from pigeond.config import Config
from testkit.raw_http import Connection, Response, parse_response


def answer(request: Any, **params: str) -> JsonResponse:
    return JsonResponse(200, params)


def dispatched(api: JsonApi, method: bytes, path: bytes) -> Response:
    connection = Connection(make_site(api, Config(), reactor=Clock()))
    connection.send(method + b" " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return parse_response(connection.output())


def test_each_parameter_reaches_the_handler_by_name() -> None:
    """``{channel}`` and ``{session}`` arrive as the handler's arguments of those names."""
    api = JsonApi()
    api.route("DELETE", "/swarm/channels/{channel}/members/{session}", answer)
    response = dispatched(api, b"DELETE", b"/swarm/channels/ops/members/ses_a")
    assert response.json() == {"channel": "ops", "session": "ses_a"}


def test_a_parameter_takes_one_whole_non_empty_segment() -> None:
    """A path with more segments, or an empty one where a parameter is, is no route."""
    table = RouteTable()
    table.add("GET", "/swarm/message/{msg_id}", answer)
    assert table.match(b"/swarm/message/msg_1") is not None
    assert table.match(b"/swarm/message/msg_1/x") is None
    assert table.match(b"/swarm/message/") is None


def test_a_literal_path_wins_over_a_parameter() -> None:
    """``/a/b`` goes to its own route even beside ``/a/{x}``."""
    api = JsonApi()
    api.route("GET", "/a/{x}", answer)
    api.route("GET", "/a/b", lambda request: JsonResponse(200, {"literal": True}))
    assert dispatched(api, b"GET", b"/a/b").json() == {"literal": True}
    assert dispatched(api, b"GET", b"/a/c").json() == {"x": "c"}


def test_a_handler_without_the_path_s_parameter_is_refused_at_once() -> None:
    """The table checks a handler's arguments when the route is added, not at a request."""
    with pytest.raises(ValueError, match="does not take"):
        RouteTable().add("GET", "/swarm/names/{name}", lambda request: None)


def test_two_paths_that_could_match_one_request_are_refused() -> None:
    """``/a/{x}/c`` and ``/a/b/{y}`` both match ``/a/b/c``: the second is refused."""
    table = RouteTable()
    table.add("GET", "/a/{x}/c", answer)
    with pytest.raises(ValueError, match="overlaps"):
        table.add("GET", "/a/b/{y}", answer)


def test_a_parameter_that_is_not_utf8_is_a_400() -> None:
    """Raw bytes that do not decode are refused before any handler runs (Twisted itself
    refuses a request line that is not ASCII; the router does not count on it)."""
    with pytest.raises(HttpError) as refused:
        path_params({"msg_id": b"msg_\xff"})
    assert refused.value.status == 400 and "msg_id" in refused.value.message
