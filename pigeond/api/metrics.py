"""``GET /metrics``: what a monitor scrapes, in Prometheus' text format.

Delivery's counters (hand-offs, failures by class, accept → hand-off latency, turn
waits: :class:`pigeond.delivery.metrics.DeliveryMetrics`) share one registry with the
gauges set here at each scrape from the database and the daemon's state: messages by
state, the age of the oldest queued message, the messages held for a person, the event
stream and opencode.  Behind the
token like every route but ``/health``.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from twisted.internet.interfaces import IReactorTime
from twisted.web import server

from pigeond.api.routes import DeliveryHealth
from pigeond.api.web import JsonApi, TextResponse
from pigeond.model import State
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database

METRICS_PATH = "/metrics"


class MetricsRoute:
    def __init__(
        self,
        db: Database,
        clock: IReactorTime,
        registry: CollectorRegistry,
        delivery_health: Callable[[], DeliveryHealth],
    ) -> None:
        self._db = db
        self._clock = clock
        self._registry = registry
        self._delivery_health = delivery_health
        self._messages = Gauge(
            "pigeond_messages", "Direct messages by state", ["state"], registry=registry
        )
        self._oldest_queued = Gauge(
            "pigeond_oldest_queued_age_seconds",
            "Age of the oldest queued message (0 when none is queued)", registry=registry,
        )  # fmt: skip
        self._held = Gauge(
            "pigeond_held_for_a_person",
            "Messages a conversation brake holds until a person releases or drops them",
            registry=registry,
        )  # fmt: skip
        self._in_flight = Gauge(
            "pigeond_in_flight_targets", "Targets with a hand-off in flight", registry=registry
        )
        self._event_stream = Gauge(
            "pigeond_event_stream_connected",
            "1 while the event stream from opencode is connected (0 when delivery is off)",
            registry=registry,
        )  # fmt: skip
        self._opencode = Gauge(
            "pigeond_opencode_reachable",
            "1 if the last call to opencode was answered (0 when not, or delivery is off)",
            registry=registry,
        )  # fmt: skip

    def install(self, api: JsonApi) -> JsonApi:
        api.route("GET", METRICS_PATH, self.metrics)
        return api

    async def metrics(self, request: server.Request) -> TextResponse:
        counts = await self._db.read(SwarmRepository.count_by_state)
        oldest_at = await self._db.read(SwarmRepository.oldest_queued_at)
        for state in State:
            self._messages.labels(state.value).set(counts.get(state.value, 0))
        self._held.set(await self._db.read(SwarmRepository.brake_held_count))
        now_ms = int(self._clock.seconds() * 1000)
        self._oldest_queued.set(0 if oldest_at is None else max(0, now_ms - oldest_at) / 1000)
        health = self._delivery_health()
        self._in_flight.set(health.in_flight)
        self._event_stream.set(1 if health.event_stream == "connected" else 0)
        self._opencode.set(1 if health.opencode == "ok" else 0)
        text = generate_latest(self._registry).decode("utf-8")
        return TextResponse(200, text, CONTENT_TYPE_LATEST)
