"""Prometheus metrics of one gateway, on a registry passed in (never the global default), so
two apps in one process (tests, replicas) keep separate counts. Three parts:
- ``GatewayMetrics``: counters and histograms the request path records directly.
- ``RowMetrics``: observed from each request-log row as it is submitted (the row already
  carries every attempt's latency, the time to first token, the tenant and the cost), so the
  request path needs no extra instrumentation: upstream latency per backend and outcome,
  time to first token, fallbacks, spend per tenant, requests per router version.
- ``StateCollector``: read at scrape time: budget, spend and remaining budget per tenant
  (from the ledger, rollover applied), the live router version, the log-queue depth and
  dropped rows. The circuit-breaker state is exported by ``gateway/reliability/circuit.py`` itself.
``/metrics`` renders in a worker thread because the budget gauges read the database.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError

from gateway.store.periods import utcnow

if TYPE_CHECKING:
    from gateway.seams import LogSink
    from gateway.store.logwriter import LogStats

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class GatewayMetrics:
    """Counters and histograms of the request path."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "tollgate_requests",
            "Chat completion requests by route, answering backend and HTTP status.",
            ["route", "model", "status", "stream"], registry=r)
        self.latency = Histogram(
            "tollgate_request_latency_seconds",
            "Wall time of a chat completion request (to the last byte for streams).",
            ["route", "stream"], buckets=LATENCY_BUCKETS, registry=r)
        self.overhead = Histogram(
            "tollgate_gateway_overhead_seconds",
            "Time spent before the first upstream attempt: auth, routing, budget.",
            ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.routing = Histogram(
            "tollgate_routing_seconds", "Encoder plus router decision time.",
            buckets=LATENCY_BUCKETS, registry=r)
        self.decisions = Counter(
            "tollgate_routing_decisions",
            "Routing decisions by the encoder that made them: the cascade's static encoder "
            "where its decision was safe, MiniLM (the router's own) elsewhere.",
            ["encoder"], registry=r)
        self.loop_stalls = Histogram(
            "tollgate_event_loop_stall_seconds",
            "Times the event loop was held past 50 ms, by how long (gateway/reliability/"
            "loop_watch.py logs where).", buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r)
        self.attempts = Counter(
            "tollgate_upstream_attempts",
            "Upstream attempts by backend and outcome (HTTP status or error kind).",
            ["model", "outcome"], registry=r)
        self.cost = Counter(
            "tollgate_cost_usd", "Settled spend in USD by backend.", ["model"], registry=r
        )
        self.tokens = Counter(
            "tollgate_tokens", "Tokens by backend and direction.", ["model", "kind"], registry=r
        )
        self.overruns = Counter(
            "tollgate_budget_overruns",
            "Settlements where a provider reported more than the reserved bound (the tenant "
            "is charged the reservation; the excess is the operator's).", registry=r)
        self.feedback_replaced = Counter(
            "tollgate_feedback_replaced",
            "Feedbacks that replaced the same tenant's earlier feedback on a request.",
            registry=r)
        self.overrun_usd = Counter(
            "tollgate_budget_overrun_usd",
            "USD providers reported past the reserved bound (the operator's, never charged).",
            registry=r)
        self.response_cache = Counter(
            "tollgate_response_cache", "Response cache lookups and stores by result: hit, "
            "miss, store, error (Redis unreachable: served uncached).", ["result"], registry=r)
        self.overrun_by_backend = Counter(
            "tollgate_overrun_usd",
            "USD providers reported past the reserved bound, by backend: the operator's loss "
            "(tenants are charged at most their reservation; gateway/serving/budget/bound_factors.py).",
            ["backend"], registry=r)
        self.timeout_charges = Counter(
            "tollgate_timeout_charges",
            "Upstream attempts that timed out after the request was sent, charged to the "
            "tenant at the prompt's input cost (the provider may bill them), by backend.",
            ["model"], registry=r)
        self.timeout_charged_usd = Counter(
            "tollgate_timeout_charged_usd",
            "USD charged to tenants for attempts that timed out after sending, by backend.",
            ["model"], registry=r)


log = logging.getLogger(__name__)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)


def _upstream(attempt: dict[str, Any]) -> bool:
    return not str(attempt.get("error") or "").startswith("budget")


class RowMetrics:
    """Histograms and counters fed from request-log rows."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.upstream_latency = Histogram(
            "tollgate_upstream_latency_seconds", "Latency of each upstream attempt (to the "
            "response or first byte) by backend and outcome status.",
            ["model", "status"], buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram(
            "tollgate_time_to_first_token_seconds", "Streaming requests: time from the request "
            "to the first byte relayed.", ["route", "model"], buckets=TTFT_BUCKETS, registry=r)
        self.fallbacks = Counter(
            "tollgate_fallbacks", "Requests that went past their first candidate (upstream "
            "failure or budget), by route and the backend that answered ('none' if none did).",
            ["route", "model"], registry=r)
        self.tenant_spend = Counter(
            "tollgate_tenant_spend_usd", "Settled spend in USD by tenant.", ["tenant_id"],
            registry=r)
        self.by_version = Counter(
            "tollgate_routed_requests", "Routed requests by router version and chosen backend.",
            ["router_version", "model"], registry=r)

    def observe(self, row: dict[str, Any]) -> None:
        route = row.get("route") or "passthrough"
        model = row.get("chosen_model") or "none"
        attempts = list(row.get("attempts") or [])
        for a in attempts:
            if _upstream(a) and a.get("latency_ms") is not None:
                self.upstream_latency.labels(str(a.get("model")), str(a.get("status"))).observe(
                    float(a["latency_ms"]) / 1000)
        if row.get("ttft_ms") is not None:
            self.ttft.labels(route, model).observe(float(row["ttft_ms"]) / 1000)
        if len(attempts) > 1:
            answered = model if row.get("status") == 200 else "none"
            self.fallbacks.labels(route, answered).inc()
        if row.get("cost_usd") and row.get("tenant_id"):
            self.tenant_spend.labels(str(row["tenant_id"])).inc(float(row["cost_usd"]))
        if row.get("router_version"):
            self.by_version.labels(str(row["router_version"]), model).inc()


class MetricsTap:
    """A log writer that counts each row into ``RowMetrics`` and hands it on unchanged.

    ``manage`` says whether this tap starts and closes the inner writer (False when the store
    owns it, so the writer is not started or closed twice); the rest is the inner writer's."""

    def __init__(self, inner: LogSink, metrics: RowMetrics, *, manage: bool) -> None:
        self.inner, self.metrics, self._manage = inner, metrics, manage

    def submit(self, row: dict[str, Any]) -> bool:
        try:
            self.metrics.observe(row)
        except Exception:  # a metrics fault must never lose the log row
            log.exception("metrics from a log row failed")
        return self.inner.submit(row)

    @property
    def pending(self) -> int:
        return self.inner.pending

    @property
    def stats(self) -> LogStats:
        return self.inner.stats

    async def flush(self, timeout_s: float | None = None) -> bool:
        return await self.inner.flush(timeout_s)

    async def start(self, limiter: Any = None) -> None:
        if self._manage:
            await self.inner.start(limiter)

    async def close(self, timeout_s: float | None = 30.0) -> bool:
        if self._manage:
            return await self.inner.close(timeout_s)
        return True


class StateCollector(Collector):
    """Gauges read when Prometheus scrapes: budgets, router version, log queue."""

    def __init__(self, ctx: Any, clock: Callable[[], datetime] | None = None) -> None:
        self._ctx = ctx
        self._clock = clock or utcnow

    def describe(self) -> Iterator[Metric]:
        return iter(())  # read at collect time only: no database access at registration

    def collect(self) -> Iterator[Metric]:
        yield from self._budgets()
        yield from self._exploration()
        ctx = self._ctx
        info = GaugeMetricFamily("tollgate_router_info",
                                 "The live router artifact (value 1; its version in a label).",
                                 labels=["version"])
        info.add_metric([str(ctx.pool.current.version)], 1.0)
        yield info
        writer = ctx.log_writer
        depth = GaugeMetricFamily("tollgate_log_queue_depth",
                                  "Request-log rows accepted but not yet written.")
        depth.add_metric([], float(writer.pending))
        yield depth
        stats = writer.stats
        dropped = CounterMetricFamily("tollgate_log_rows_dropped",
                                      "Request-log rows dropped (queue full or rejected).")
        dropped.add_metric([], float(stats.dropped + stats.rejected))
        yield dropped

    def _budgets(self) -> Iterator[Metric]:
        labels = ["tenant_id", "tenant"]
        budget = GaugeMetricFamily("tollgate_budget_usd",
                                   "Budget per period in USD (tenants with a budget).", labels=labels)
        spent = GaugeMetricFamily("tollgate_budget_spent_usd",
                                  "Spend in the current budget period in USD.", labels=labels)
        remaining = GaugeMetricFamily(
            "tollgate_budget_remaining_usd",
            "Budget left in the current period: budget − spent − reserved.", labels=labels)
        engine = self._ctx.store.engine
        if engine is not None:
            from gateway.store.tenants import list_tenants

            started = time.perf_counter()
            try:
                rows = list_tenants(engine, self._clock())
            except SQLAlchemyError:  # a scrape must answer even with the db down
                log.warning("budget gauges skipped: the database is unavailable")
                rows = []
            for t in rows:
                key = [t.id, t.name]
                spent.add_metric(key, t.spent_usd)
                if t.budget_usd is not None:
                    budget.add_metric(key, t.budget_usd)
                    remaining.add_metric(key, max(0.0, t.budget_usd - t.spent_usd
                                                  - t.reserved_usd))
            log.debug("budget gauges read in %.3fs", time.perf_counter() - started)
        yield budget
        yield spent
        yield remaining

    def _exploration(self) -> Iterator[Metric]:
        """Per route: exploration spent and what ``max_share`` of the route's spend allows
        (gateway/learning/exploration_ledger.py), and the share itself."""
        cfg = self._ctx.settings.retraining.exploration
        share = GaugeMetricFamily(
            "tollgate_exploration_max_share",
            "Exploration spend bound as a share of each route's spend (0: exploration off; "
            "absent: no share bound).")
        if not cfg.enabled:
            share.add_metric([], 0.0)
        elif cfg.max_share is not None:
            share.add_metric([], cfg.max_share)
        yield share
        spent = GaugeMetricFamily(
            "tollgate_exploration_spent_usd",
            "Exploration spend per route (shadow answers, the reference's answers, the "
            "judge's calls), on the operator.", labels=["route"])
        allowed = GaugeMetricFamily(
            "tollgate_exploration_allowance_usd",
            "What max_share of the route's recorded spend allows exploration so far.",
            labels=["route"])
        engine = self._ctx.store.engine
        if engine is not None:
            from gateway.learning.exploration_ledger import shares

            try:
                rows = shares(engine)
            except SQLAlchemyError:  # a scrape must answer even with the db down
                log.warning("exploration gauges skipped: the database is unavailable")
                rows = {}
            for route, v in rows.items():
                spent.add_metric([route], v["spent_usd"] + v["reserved_usd"])
                allowed.add_metric([route], v["budget_usd"])
        yield spent
        yield allowed


def install(ctx: Any, *, store_owns_writer: bool) -> None:
    """Add the extension to ``ctx.metrics.registry`` and tap ``ctx.log_writer``."""
    registry = ctx.metrics.registry
    row_metrics = RowMetrics(registry)
    ctx.log_writer = MetricsTap(ctx.log_writer, row_metrics, manage=not store_owns_writer)
    registry.register(StateCollector(ctx))
