"""What delivery counts for ``GET /metrics``: hand-offs, failures by class, how long a
message waits from its 202 to its hand-off, and how long hand-offs wait for a turn.

The counters live in a registry of their own (not prometheus_client's global one), made
by the daemon's wiring and shared with the ``/metrics`` route, so tests and a second
daemon in one process never see each other's numbers.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# From 5 ms (an idle target, the stand-in answering at once) to an hour (a busy session
# whose turns are long, or opencode down for a while).
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900,
                     3600)  # fmt: skip
# The failure classes of pigeond.delivery.policy plus "internal": a bug of ours.
FAILURE_CLASSES = ("outage", "permanent", "attempt", "internal")


class DeliveryMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.hand_offs = Counter(
            "pigeond_hand_offs", "Prompts opencode took (one per batch)", registry=self.registry
        )
        self.messages_handed_off = Counter(
            "pigeond_messages_handed_off", "Messages in the prompts opencode took",
            registry=self.registry,
        )  # fmt: skip
        self.failures = Counter(
            "pigeond_hand_off_failures", "Hand-offs that failed, by failure class",
            ["class"], registry=self.registry,
        )  # fmt: skip
        for name in FAILURE_CLASSES:
            self.failures.labels(name)  # every class shows, at 0 until it happens
        self.accept_to_hand_off = Histogram(
            "pigeond_accept_to_hand_off_seconds",
            "From a message's 202 to opencode taking the prompt that carried it",
            buckets=LATENCY_BUCKETS_S, registry=self.registry,
        )  # fmt: skip
        self.turn_wait = Histogram(
            "pigeond_turn_wait_seconds",
            "How long a hand-off waited for its target's running turn to end",
            buckets=LATENCY_BUCKETS_S, registry=self.registry,
        )  # fmt: skip
