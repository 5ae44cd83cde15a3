"""POST /v1/embeddings: authenticate → admit → parse → reserve → embed → settle → log.

A passthrough to the named backend (a group's deployments tried as for chat), which must be an
embedding backend (``model_info.mode``, else litellm's model map: gateway/pool/modes.py) the
tenant's policy allows. Money and tokens as on chat completions: the input's token bound
(UTF-8 bytes, one per token id, plus each input's framing tokens: gateway/serving/
embeddings_request.py; × the backend's learned factor, gateway/serving/bound_factors.py) is
reserved against the tenant's TPM at admission and, × the input price, against its budget;
settled at the reported usage, clamped to that bound before anything is written (the rest is
the operator's overrun), before the response is sent; an attempt that timed out after
sending may be billed by the provider, so it is charged what was held. Rate limits, circuit
breakers, the request log and the access line are the chat endpoint's.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from gateway.auth import authenticate, require_model
from gateway.config import Backend
from gateway.context import GatewayContext
from gateway.errors import GatewayError, budget_exceeded, invalid, model_not_found
from gateway.pool import Pool
from gateway.price_like import unpriced_fix
from gateway.reliability.guards import circuit_open_error
from gateway.reliability.parallel import Slot
from gateway.serving.access_log import log_access
from gateway.serving.bound_factors import ABSURD_FACTOR, held_out_error, widened, widened_price
from gateway.serving.budget_hold import BudgetHold
from gateway.serving.embeddings_request import EmbeddingsRequest, parse_embeddings_request
from gateway.serving.endpoint import finished, new_request_id
from gateway.serving.outcome import reported_tokens
from gateway.serving.response_headers import RATELIMIT_STATE
from gateway.serving.upstream import UpstreamFailure, embed
from gateway.serving.validation import json_body
from gateway.store.records import Tenant

ROUTE = "embeddings"  # the route label of the metrics and the log row's reason


def embedding_backend(pool: Pool, tenant: Tenant, req: EmbeddingsRequest) -> Backend:
    """The named backend: known and allowed (404), of embedding mode (400), priced (503)."""
    allowed = tenant.policy.allowed_models
    model = pool.settings.resolve_alias(req.model)  # model_group_alias
    require_model(tenant, req.model, model)  # the calling key's models (401)
    backend = pool.backend(model)
    if backend is None or (allowed is not None and model not in allowed):
        raise model_not_found(model)
    mode = pool.modes.get(model)
    if mode != "embedding":
        raise invalid(f"{model!r} is a model of mode {mode!r}, not an embedding model",
                      param="model", code="model_not_supported")
    if model not in pool.prices:
        raise GatewayError(503, f"backend {model!r} has no price: {unpriced_fix(backend)}",
                           "service_unavailable", code="backend_unpriced")
    return backend


def upstream_error(f: UpstreamFailure) -> GatewayError:
    """The client's error for a failed attempt, as the chat endpoint maps it: the upstream's
    400 about the request as it is, a timeout 504, a rate limit 503, anything else 502."""
    if not f.retryable:
        return GatewayError(f.status, f"upstream refused the request: {f.message}",
                            "invalid_request_error", code="upstream_bad_request")
    status = {504: 504, 429: 503}.get(f.status, 502)
    return GatewayError(status, f"the upstream attempt failed: {f.kind}: {f.message}",
                        "upstream_error", code={504: "upstream_timeout",
                                                503: "upstream_unavailable"}.get(status,
                                                                                 "bad_gateway"))


class EmbeddingsCall:
    """One embeddings request's record, from authentication to its log row."""

    def __init__(self, ctx: GatewayContext, tenant: Tenant, rid: str, t0: float) -> None:
        self.ctx, self.tenant, self.rid, self.t0 = ctx, tenant, rid, t0
        self.created_at = datetime.now(UTC)
        self.hold = BudgetHold(ctx, tenant, rid)
        self.backend: str | None = None
        self.answered = False
        self.prompt_tokens: int | None = None
        self.cost_usd = 0.0
        self.overrun_usd = 0.0  # reported past the bound: the operator's (bound_factors.py)
        self.attempts: list[dict] = []
        self.parallel_slot: Slot | None = None  # of max_parallel_requests
        self.tpm_grant: Any = None  # tokens reserved against the tenant's TPM at admission

    async def respond(self, request: Request) -> Response:
        ctx = self.ctx
        setattr(request.state, RATELIMIT_STATE, await ctx.reliability.admit(self.tenant))
        self.parallel_slot = await ctx.reliability.take_slot(self.tenant, self.rid)
        req = parse_embeddings_request(await json_body(request))
        pool = ctx.pool.current  # one pool for the whole request
        backend = embedding_backend(pool, self.tenant, req)
        self.backend, price = backend.model_name, pool.prices[backend.model_name]
        f = ctx.bound_factors.factor(self.backend)
        if ctx.bound_factors.held_out(self.backend, self.tenant.principal):
            raise held_out_error(self.backend)
        bound = widened(req.token_bound(), f)
        self.tpm_grant = await ctx.reliability.reserve_tokens(self.tenant, bound, bound)
        if not await self.hold.ensure(widened_price(price, f).cost(bound, 0)):
            raise budget_exceeded("The predicted cost of these embeddings does not fit the "
                                  "remaining budget.")
        if not ctx.reliability.circuits.allow(self.backend):
            raise circuit_open_error(ctx.reliability, [self.backend])
        started = time.perf_counter()
        try:
            resp = await embed(backend, req.input, req.params)
        except UpstreamFailure as f:
            self._attempt(f.status, str(f), started, f)
            if f.billable:  # the provider has the input and may bill it
                self.cost_usd = self.hold.held
            raise upstream_error(f) from f
        self._attempt(200, None, started, None)
        usage = getattr(resp, "usage", None)  # litellm's EmbeddingResponse
        reported = reported_tokens(getattr(usage, "prompt_tokens", None))
        self._take_usage(reported, bound, price)
        await self.finish(200, None)  # settled before the client has the answer
        body: dict[str, Any] = resp.model_dump()
        body["model"] = self.backend
        return JSONResponse(body, headers={**self.headers(),
                                           "x-tollgate-cost-usd": f"{self.cost_usd:.10f}"})

    def _take_usage(self, reported: int | None, bound: int, price: Any) -> None:
        """The reported count, clamped to the bound (none reported: the bound); what lies past
        it (at most ``ABSURD_FACTOR`` × the bound) is the operator's overrun, and teaches the
        backend's factor (gateway/serving/bound_factors.py)."""
        self.prompt_tokens = min(reported, bound) if reported else bound
        self.cost_usd, self.answered = min(price.cost(self.prompt_tokens, 0), self.hold.held), True
        if reported is None or reported <= bound:
            return
        excess = min(reported, int(ABSURD_FACTOR * max(bound, 1))) - bound
        self.overrun_usd = price.cost(excess, 0)
        self.ctx.bound_factors.reported(self.backend, reported / max(bound, 1),
                                        self.tenant.principal)
        m = self.ctx.metrics
        m.overruns.inc()
        m.overrun_usd.inc(self.overrun_usd)
        m.overrun_by_backend.labels(self.backend).inc(self.overrun_usd)
        self.attempts[-1]["overrun_usd"] = self.overrun_usd

    def _attempt(self, status: int, error: str | None, started: float,
                 failure: UpstreamFailure | None) -> None:
        self.ctx.reliability.upstream_result(self.backend, failure, self.tenant.principal)
        self.attempts.append({"model": self.backend, "status": status, "error": error,
                              "latency_ms": round((time.perf_counter() - started) * 1000, 3)})
        self.ctx.metrics.attempts.labels(self.backend, str(status)).inc()

    def headers(self) -> dict[str, str]:
        h = {"x-tollgate-request-id": self.rid, "x-tollgate-router-version": "passthrough"}
        if self.answered and self.backend:
            h["x-tollgate-model"] = self.backend
        return h

    async def finish(self, status: int, error: str | None) -> None:
        """Settle, count and log once (a second call is a no-op)."""
        if self.hold.settled:
            return
        await self.ctx.reliability.free_slot(self.parallel_slot)
        self.parallel_slot = None
        try:
            await self.hold.settle(self.cost_usd)
        except Exception as e:  # noqa: BLE001 - a settlement fault must not lose the log row
            error = f"{error + '; ' if error else ''}settlement failed: {type(e).__name__}: {e}"
        m, model = self.ctx.metrics, self.backend if self.answered else "none"
        m.requests.labels(ROUTE, model or "none", str(status), "false").inc()
        m.latency.labels(ROUTE, "false").observe(time.perf_counter() - self.t0)
        if self.cost_usd and self.backend:
            m.cost.labels(self.backend).inc(self.cost_usd)
        if self.answered and self.backend:
            m.tokens.labels(self.backend, "prompt").inc(self.prompt_tokens or 0)
        if self.answered or self.tpm_grant is not None:  # the TPM window: what was used
            used = (self.prompt_tokens or 0) if self.answered else (
                self.tpm_grant.tokens if self.cost_usd else 0)
            await self.ctx.reliability.settle_tokens(self.tenant, self.tpm_grant, used)
        row = self.row(status, error)
        self.ctx.log_writer.submit(row)
        log_access(row, self.tenant)

    def row(self, status: int, error: str | None) -> dict[str, Any]:
        """The request-log row, with the chat rows' keys (docs/architecture.md)."""
        return {
            "id": self.rid, "tenant_id": self.tenant.id, "key_id": self.tenant.key_id,
            "created_at": self.created_at,
            "route": None, "lam": None, "router_version": None, "candidates": [],
            "equivalent": [], "reason": ROUTE, "stream": False, "prompt_text": None,
            "chosen_model": self.backend, "attempts": self.attempts,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": 0 if self.answered else None,
            "cost_usd": self.cost_usd, "reserved_usd": self.hold.held,
            "latency_ms": round((time.perf_counter() - self.t0) * 1000, 3), "ttft_ms": None,
            "status": status, "error": error,
        }


async def embeddings(request: Request) -> Response:
    """OpenAI's embeddings endpoint."""
    ctx: GatewayContext = request.app.state.ctx
    t0, rid = time.perf_counter(), new_request_id()
    try:
        tenant = await authenticate(ctx, request)
    except GatewayError as e:
        ctx.metrics.requests.labels(ROUTE, "none", str(e.status), "false").inc()
        return e.response({"x-tollgate-request-id": rid})
    call = EmbeddingsCall(ctx, tenant, rid, t0)
    return await finished(call, lambda: call.respond(request))
