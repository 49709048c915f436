"""The OpenAPI description (``pigeond/api/openapi.json``): served at ``GET /openapi.json``,
shipped in the wheel, and held to the code it describes (routes, patterns, enums, bounds,
the gate's statuses), so that it cannot drift from it unnoticed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.web.server import Site

import pigeond
from pigeond import __version__
from pigeond.api.access import HEALTH_PATH, AccessPolicy
from pigeond.api.openapi import OPENAPI_PATH, openapi_document
from pigeond.api.routes import DEFAULT_INBOX_LIMIT, MAX_INBOX_LIMIT, SwarmRoutes
from pigeond.api.send_request import MAX_TTL_S
from pigeond.api.web import JsonApi, make_site
from pigeond.config import Config
from pigeond.model import (
    CHANNEL_RE,
    KINDS,
    MSG_ID_RE,
    NAME_RE,
    NOTICE_KIND,
    PRIORITIES,
    RUNTIME_IDS,
    SENDER_RE,
    SESSION_ID_RE,
    HandoffMode,
    NewMessage,
    Runtime,
    State,
    is_reserved_sender,
)
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from testkit.raw_http import Connection, Response, parse_response
from tests.fuzz_strategies import bounded
from tests.openapi_check import check_body
from tests.storage_helpers import clock_daemon, repo_of

REPO = Path(__file__).resolve().parent.parent
PACKAGED = Path(pigeond.__file__).parent / "api" / "openapi.json"
TOKEN = "o" * 43
DOC = openapi_document()
AGENT_PREFIX = "/swarm/agent/"
SCHEMAS: dict[str, Any] = DOC["components"]["schemas"]
# the model's rule for each field or parameter of that name, wherever the document has one
PATTERNS = {
    "from": SENDER_RE,
    "to": SESSION_ID_RE,
    "session": SESSION_ID_RE,
    "channel": CHANNEL_RE,
    "msg_id": MSG_ID_RE,
    "reply_to": MSG_ID_RE,
    "name": NAME_RE,
    "from_name": NAME_RE,
    "to_name": NAME_RE,
}


def documented_routes() -> set[tuple[str, str]]:
    return {
        (method.upper(), re.sub(r"\{[^}]*\}", "{}", path))
        for path, item in DOC["paths"].items()
        for method in item
    }


@pytest.fixture
def site(repo: SwarmRepository, clock: Clock) -> Site:
    api = SwarmRoutes(InlineDatabase(repo), clock, Config()).install(
        JsonApi(gate=AccessPolicy(own_uid=os.getuid(), token=TOKEN))
    )
    return make_site(api, Config(max_body_bytes=64 * 1024), reactor=clock)


def get(site: Site, path: str, token: str | None = TOKEN) -> Response:
    auth = b"" if token is None else b"Authorization: Bearer " + token.encode() + b"\r\n"
    connection = Connection(site)
    connection.send(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + b"\r\n")
    response = parse_response(connection.output())
    connection.close()
    return response


def walk(node: Any, name: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema in the document with the name of the property or parameter it is for."""
    if isinstance(node, dict):
        if "name" in node and "schema" in node:  # a parameter
            yield node["name"], node["schema"]
        for key, value in node.items():
            if key == "properties":
                for prop, schema in value.items():
                    yield prop, schema
                    yield from walk(schema, prop)
            else:
                yield from walk(value, name)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item, name)


# -- what is served, and what is shipped ----------------------------------------------------


def test_the_document_lists_exactly_the_routes_the_daemon_serves(
    tmp_path: Path, clock: Clock
) -> None:
    """Every route the daemon serves is in the document, and nothing else is."""
    daemon = clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)
    assert documented_routes() == daemon.api.served()
    repo_of(daemon).close()


def test_the_document_names_each_path_parameter_as_the_routing_table_does(
    tmp_path: Path, clock: Clock
) -> None:
    """Each documented path, its parameters' names included, is a route of the table."""
    daemon = clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)
    documented = {(method.upper(), path) for path, item in DOC["paths"].items() for method in item}
    assert documented == daemon.api.table.routes()
    repo_of(daemon).close()


def test_openapi_json_serves_the_packaged_file(site: Site) -> None:
    """GET /openapi.json answers the file in the package, as JSON."""
    response = get(site, OPENAPI_PATH)
    assert response.status == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == json.loads(PACKAGED.read_text(encoding="utf-8"))


def test_openapi_json_needs_the_token(site: Site) -> None:
    """Like every route but /health, the description is behind the bearer token."""
    assert get(site, OPENAPI_PATH, token=None).status == 401


@pytest.mark.slow
def test_the_wheel_carries_the_document(tmp_path: Path) -> None:
    """The built wheel holds pigeond/api/openapi.json, byte for byte the one served."""
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("pigeond-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("pigeond/api/openapi.json") == PACKAGED.read_bytes()


def test_the_document_is_valid_openapi_3_1() -> None:
    """schemathesis loads it and finds it valid against the OpenAPI 3.1 schema."""
    assert DOC["openapi"].startswith("3.1.")
    schemathesis.openapi.from_dict(DOC).validate()


def test_the_version_is_the_package_version() -> None:
    """info.version follows pigeond's version."""
    assert DOC["info"]["version"] == __version__


# -- held to the code -----------------------------------------------------------------------


def test_every_pattern_is_the_models() -> None:
    """Each field and parameter with a model rule has exactly that rule as its pattern."""
    paths = {p: item for p, item in DOC["paths"].items() if not p.startswith(AGENT_PREFIX)}
    rest = {**DOC, "paths": paths}
    found = [(name, s["pattern"]) for name, s in walk(rest) if name in PATTERNS and "pattern" in s]
    assert {name for name, _ in found} == set(PATTERNS)
    assert [(n, p) for n, p in found if p != PATTERNS[n].pattern] == []


def test_the_agent_routes_take_the_ids_of_the_runtimes_that_ask() -> None:
    """/swarm/agent/*: a Claude Code session id, and for a wait an MCP-only member's too."""
    claude, mcp = RUNTIME_IDS[Runtime.CLAUDE].pattern, RUNTIME_IDS[Runtime.MCP].pattern
    found = {
        path: schema["pattern"]
        for path, item in DOC["paths"].items()
        if path.startswith(AGENT_PREFIX)
        for name, schema in walk(item)
        if name == "session"
    }
    assert found == {
        "/swarm/agent/claude/event": claude,
        "/swarm/agent/claude/turn-end": claude,
        "/swarm/agent/wait": f"^(?:{claude[1:-1]}|{mcp[1:-1]})$",
    }


def test_enums_and_bounds_are_the_codes() -> None:
    """Kinds, priorities, states, ttl_s and limit bounds are the code's own values."""
    send = SCHEMAS["SendRequest"]["properties"]
    assert send["kind"]["enum"] == [*KINDS, None]
    assert send["priority"]["enum"] == [*PRIORITIES, None]
    assert send["ttl_s"]["maximum"] == MAX_TTL_S
    assert SCHEMAS["InboxMessage"]["properties"]["kind"]["enum"] == [*KINDS, NOTICE_KIND]
    assert SCHEMAS["Message"]["properties"]["state"]["enum"] == [s.value for s in State]
    (limit,) = [
        p for p in DOC["paths"]["/swarm/inbox"]["get"]["parameters"] if p["name"] == "limit"
    ]
    assert limit["schema"]["maximum"] == MAX_INBOX_LIMIT
    assert f"default {DEFAULT_INBOX_LIMIT}" in limit["description"]
    assert SCHEMAS["InboxPage"]["properties"]["messages"]["maxItems"] == MAX_INBOX_LIMIT


def ecma_search(pattern: str, text: str) -> bool:
    """JSON Schema's ``pattern``: ECMA-262, unanchored, and ``$`` only at the very end."""
    return re.search(re.sub(r"\$$", r"\\Z", pattern), text) is not None


@bounded(300)
@given(
    name=st.one_of(
        st.text(alphabet="pigeondPIGEOND._-a1\n ", max_size=14),
        st.sampled_from(["pigeond", "PIGEOND", "pigeond.x", "pigeond-", "pigeondx", "xpigeond"]),
    )
)
def test_the_documented_sender_rule_is_the_models(name: str) -> None:
    """The document's rule for ``from`` (pattern, not the reserved names) is the model's."""
    rule = SCHEMAS["SendRequest"]["properties"]["from"]
    documented = ecma_search(rule["pattern"], name) and not ecma_search(
        rule["not"]["pattern"], name
    )
    assert documented == (SENDER_RE.fullmatch(name) is not None and not is_reserved_sender(name))


def test_every_operation_lists_the_gates_refusals() -> None:
    """400, 403 and 421 everywhere; 401 wherever a token is needed; 415 on every POST; and
    only GET /health needs no token, as the gate says."""
    for path, item in DOC["paths"].items():
        for method, operation in item.items():
            statuses = set(operation["responses"])
            public = operation.get("security", DOC["security"]) == []
            assert {"400", "403", "408", "413", "414", "421", "431", "503"} <= statuses, path
            assert ("401" in statuses) == (not public), path
            assert ("415" in statuses) == (method in ("post", "put")), path
            assert public == (path == HEALTH_PATH.decode() and method == "get"), path


def test_a_delivered_message_is_answered_as_documented(
    site: Site, repo: SwarmRepository, clock: Clock
) -> None:
    """A handed-off message, in an inbox page and on its own, matches the documented schema."""
    now = int(clock.seconds() * 1000)
    message = NewMessage("msg_1", "ses_a", "ses_b", None, "task.assign", "urgent", None, "hi")
    repo.accept(message, now, now + 1000)
    repo.mark_handed_off_many(["msg_1"], now, now + 60_000, HandoffMode("plan", "p", "m"))
    for path in ("/swarm/inbox?session=ses_b", "/swarm/message/msg_1"):
        response = get(site, path)
        assert response.status == 200
        check_body("GET", path.split("?")[0], 200, response.headers, response.body)
