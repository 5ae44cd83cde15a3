"""Prometheus metrics of one gateway, on a registry passed in (never the global default), so
two apps in one process (tests, replicas) keep separate counts. Later issues add to it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class GatewayMetrics:
    """Counters and histograms of the request path."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "tollgate_requests",
            "Chat completion requests by route, answering backend and HTTP status.",
            ["route", "model", "status", "stream"],
            registry=r,
        )
        self.latency = Histogram(
            "tollgate_request_latency_seconds",
            "Wall time of a chat completion request (to the last byte for streams).",
            ["route", "stream"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "tollgate_gateway_overhead_seconds",
            "Time spent before the first upstream attempt: auth, routing, budget.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.routing = Histogram(
            "tollgate_routing_seconds",
            "Encoder plus router decision time.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.attempts = Counter(
            "tollgate_upstream_attempts",
            "Upstream attempts by backend and outcome (HTTP status or error kind).",
            ["model", "outcome"],
            registry=r,
        )
        self.cost = Counter(
            "tollgate_cost_usd", "Settled spend in USD by backend.", ["model"], registry=r
        )
        self.tokens = Counter(
            "tollgate_tokens", "Tokens by backend and direction.", ["model", "kind"], registry=r
        )
