"""Holding an answer to the OpenAPI description (``pigeond/api/openapi.json``): is its status one
the document lists for the request, and does its body match the documented schema?

The fuzzers use it on every answer, so the document is checked against far more answers
than any hand-written test gives, populated inbox pages included (schemathesis, against a
daemon that delivers nothing, only ever sees empty ones).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import requests  # schemathesis's own HTTP client: its Response wraps a request of it
import schemathesis
from schemathesis import APIOperation

from pigeond.api.openapi import openapi_document

DOCUMENT = openapi_document()
SCHEMA = schemathesis.openapi.from_dict(DOCUMENT)

# What the gate and the HTTP layer may answer before any route runs (docs/http-api.md).
BEFORE_ROUTING = frozenset({400, 401, 403, 408, 413, 414, 415, 421, 431, 503})


@dataclass(frozen=True, slots=True)
class Operation:
    """A documented operation: its template, method and the statuses it lists."""

    template: str
    method: str
    statuses: frozenset[int]
    public: bool  # no token needed

    @property
    def api_operation(self) -> APIOperation[Any, Any, Any, Any]:
        return SCHEMA[self.template][self.method]


def documented_operations() -> list[Operation]:
    """Every (path, method) of the document, with its statuses."""
    global_security = DOCUMENT.get("security", [])
    found = []
    for template, item in DOCUMENT["paths"].items():
        for method, operation in item.items():
            statuses = frozenset(int(code) for code in operation["responses"])
            public = operation.get("security", global_security) == []
            found.append(Operation(template, method.upper(), statuses, public))
    return found


OPERATIONS = documented_operations()


def _template_matches(template: str, path: str) -> bool:
    """As pigeond's routing table matches (pigeond/api/route_table.py): an exact path, or
    a template segment by segment, each parameter one whole non-empty segment."""
    if "{" not in template:
        return path == template
    parts, shape = path.split("/"), template.split("/")
    return len(parts) == len(shape) and all(
        p != "" if s.startswith("{") else p == s for p, s in zip(parts, shape, strict=True)
    )


def operations_for_path(path: str) -> list[Operation]:
    return [op for op in OPERATIONS if _template_matches(op.template, path)]


def expected_statuses(method: str, path: str) -> frozenset[int]:
    """What a request may be answered: the operation's documented statuses; for a path the
    document does not list, 404 (and what is refused before routing); for a method the
    path does not take, 405 (and the same)."""
    method = "GET" if method == "HEAD" else method
    operations = operations_for_path(path)
    if not operations:
        return BEFORE_ROUTING | {404}
    for op in operations:
        if op.method == method:
            return op.statuses
    return BEFORE_ROUTING | {405}


def operation_for(method: str, path: str) -> Operation | None:
    method = "GET" if method == "HEAD" else method
    for op in operations_for_path(path):
        if op.method == method:
            return op
    return None


def check_body(method: str, path: str, status: int, headers: dict[str, str], body: bytes) -> None:
    """The body is what the document says for this status (AssertionError otherwise); an
    answer outside any operation (404, 405) is ``{"error": ...}``."""
    if method == "HEAD":
        # A refusal before routing (it closes the connection) carries its JSON body even
        # to a HEAD (http_limits.error_response); harmless, as nothing follows it.
        assert body == b"" or headers.get("connection") == "close", body[:200]
        return
    parsed: Any = json.loads(body.decode("utf-8"))
    if status >= 400:
        assert isinstance(parsed, dict) and isinstance(parsed.get("error"), str), body[:300]
    operation = operation_for(method, path)
    if operation is None or status not in operation.statuses:
        return
    url = "http://127.0.0.1" + path
    response = schemathesis.Response(
        status,
        {name: [value] for name, value in headers.items()},
        body,
        requests.Request(operation.method, url).prepare(),
        0.0,
        False,
    )
    operation.api_operation.validate_response(response)
