"""What happened to one request, from authentication to its log row: the ``Outcome``.

It exists as soon as the tenant is known, before anything can be refused, so every request,
refused or answered or cancelled, settles its held money and logs exactly once (``finish``).
The plan is filled in as planning proceeds (None until the body is parsed); the attempt loop
(gateway/serving/attempts.py) records into it. The log row and the learning record are both
read from it (gateway/serving/log_row.py).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from gateway.config import Backend
from gateway.context import GatewayContext
from gateway.serving.access_log import log_access
from gateway.serving.budget_hold import BudgetHold
from gateway.serving.log_row import log_row, served
from gateway.serving.planning import PASSTHROUGH_VERSION, Plan
from gateway.store.records import Tenant


class Outcome:
    """One request's record: its plan, attempts, answer, usage and cost."""

    def __init__(self, ctx: GatewayContext, tenant: Tenant, request_id: str, t0: float) -> None:
        self.ctx, self.tenant, self.rid, self.t0 = ctx, tenant, request_id, t0
        self.created_at = datetime.now(UTC)
        self.plan: Plan | None = None  # set by the handler as planning proceeds
        self.hold = BudgetHold(ctx, tenant, request_id)
        self.attempts: list[dict] = []
        self.answered: Backend | None = None
        self.usage_prompt_tokens: int | None = None  # the upstream's count, once it gave one
        self.completion_tokens: int | None = None
        self.cost_usd: float | None = None
        self.ttft_ms: float | None = None
        self.answer_text = ""  # what the client received, for the learning loop
        self.timeout_charges: list[tuple[str, float]] = []  # (backend, USD) owed for timeouts
        self.finished = False

    @property
    def prompt_tokens(self) -> int | None:
        """The upstream's count once it reported usage, else the plan's."""
        if self.usage_prompt_tokens is not None:
            return self.usage_prompt_tokens
        return self.plan.prompt_tokens if self.plan else None

    @property
    def route_label(self) -> str:
        return (self.plan and self.plan.route) or "passthrough"

    def take_usage(self, usage: dict) -> None:
        self.usage_prompt_tokens = int(usage.get("prompt_tokens") or self.prompt_tokens or 0)
        self.completion_tokens = int(usage.get("completion_tokens") or 0)

    def headers(self) -> dict[str, str]:
        version = self.plan.router_version if self.plan else PASSTHROUGH_VERSION
        h = {"x-tollgate-request-id": self.rid, "x-tollgate-router-version": version}
        if self.answered is not None:
            h["x-tollgate-model"] = self.answered.model_name
        return h

    def answer_cost(self) -> float:
        """usage.prompt_tokens · p_in + usage.completion_tokens · p_out (0 if unanswered)."""
        if self.answered is None or self.prompt_tokens is None or self.plan is None:
            return 0.0
        price = self.plan.pool.prices[self.answered.model_name]
        return price.cost(self.prompt_tokens, self.completion_tokens or 0)

    def actual_cost(self) -> float:
        """c = the answer's cost + what timed-out attempts owe (gateway/serving/attempts.py)."""
        return self.answer_cost() + self.hold.owed

    async def finish(self, status: int, error: str | None) -> None:
        """Settle the held money with the actual cost, count, and queue the log row (once)."""
        if self.finished:
            return
        self.finished = True
        self.cost_usd = self.actual_cost()
        try:
            await self.hold.settle(self.cost_usd)
        except Exception as e:  # noqa: BLE001 - a settlement fault must not lose the log row
            error = f"{error + '; ' if error else ''}settlement failed: {type(e).__name__}: {e}"
        self._count(status)
        row = log_row(self, status, error)
        self.ctx.log_writer.submit(row)
        log_access(row, self.tenant)
        if self.ctx.learning is not None:
            await self.ctx.learning.after_request(served(self, status))
        if self.answered is not None:  # tokens per minute
            await self.ctx.reliability.used_tokens(
                self.tenant, (self.prompt_tokens or 0) + (self.completion_tokens or 0))

    def _count(self, status: int) -> None:
        m, route = self.ctx.metrics, self.route_label
        model = self.answered.model_name if self.answered else "none"
        stream = str(bool(self.plan and self.plan.request.stream)).lower()
        m.requests.labels(route, model, str(status), stream).inc()
        m.latency.labels(route, stream).observe(time.perf_counter() - self.t0)
        for backend, usd in self.timeout_charges:
            m.timeout_charges.labels(backend).inc()
            m.timeout_charged_usd.labels(backend).inc(usd)
            m.cost.labels(backend).inc(usd)
        if self.answered is not None:
            m.cost.labels(model).inc(self.answer_cost())
            m.tokens.labels(model, "prompt").inc(self.prompt_tokens or 0)
            m.tokens.labels(model, "completion").inc(self.completion_tokens or 0)
