"""POST /swarm/send in memory with the flood guard, for the flood tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from treq.client import HTTPClient
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.web.http_headers import Headers

from pigeond.api.callers import TCP_CALLER
from pigeond.api.flood import FloodGuard
from pigeond.api.routes import SwarmRoutes
from pigeond.api.web import JsonApi
from pigeond.config import Config
from pigeond.model import NewMessage
from pigeond.storage import AcceptOutcome, SwarmRepository
from pigeond.storage.database import InlineDatabase
from pigeond.storage.repository import Accept, QueueLimits
from tests.http_helpers import result_of, stub_client

BASE = "http://pigeond.test"
JSON_HEADERS = Headers({"Content-Type": ["application/json"]})


@dataclass
class Route:
    """POST /swarm/send in memory, through SwarmRoutes and JsonApi with the guard as a check."""

    stub: HTTPClient

    def send(self, **fields: str) -> tuple[int, dict[str, Any], list[str] | None]:
        """Status, body and Retry-After of a send (to ses_target unless ``channel`` is given)."""
        body = {"from": "ses_sender", "to": "ses_target", "payload": "hi", **fields}
        if "channel" in fields:
            del body["to"]
        response = result_of(
            self.stub.post(
                BASE + "/swarm/send",
                data=json.dumps(body).encode(),
                headers=JSON_HEADERS,
            )
        )
        content = json.loads(result_of(response.content()))
        return response.code, content, response.headers.getRawHeaders("retry-after")


def route(repo: SwarmRepository, clock: Clock, guard: FloodGuard) -> Route:
    """The send route on ``repo`` with ``guard`` as its admission (every TCP client: one
    caller)."""
    routes = SwarmRoutes(InlineDatabase(repo), clock, Config(), admission=guard)
    return Route(stub_client(routes.install(JsonApi())))


def admit(
    guard: FloodGuard,
    repo: SwarmRepository,
    clock: Clock,
    message: NewMessage,
    caller: str = TCP_CALLER,
) -> AcceptOutcome:
    """What the send route does: the guard around the store; raises the guard's HttpError."""
    db = InlineDatabase(repo)

    def store(limits: QueueLimits) -> Deferred[AcceptOutcome]:
        now_ms = int(clock.seconds() * 1000)
        return db.accept(
            Accept(message, now_ms, None, limits.per_target, max_queued_bytes=limits.total_bytes)
        )

    return result_of(Deferred.fromCoroutine(guard.admit(message, store, caller)))
