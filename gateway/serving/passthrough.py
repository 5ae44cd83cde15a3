"""The record and frame of a passthrough: a request answered by the one backend it names,
never routed (embeddings, images, speech, transcription, moderation, rerank). Its story:
authenticate → admit → parse → name the backend → reserve a bound → call → settle → log.

The named backend is of the endpoint's litellm mode and allowed by the tenant and the key;
the reservation is a bound on what the call can cost (embeddings: its tokens,
gateway/serving/embeddings/embeddings_request.py; the others: their units,
gateway/serving/units/unit_prices.py), settled at the cost of what was answered, never past what was
held, before the response is sent; an attempt that timed out after sending may be billed by the
provider, so it is charged what was held. Rate limits, circuit breakers (an attempt counts as the
tenant's ``principal``, as on chat), the request log and the access line are chat's. A
deployment group is tried as chat's (gateway/serving/forwarding/upstream.py ``over_deployments``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from gateway.auth import authenticate, require_model
from gateway.config import Backend
from gateway.context import GatewayContext
from gateway.errors import GatewayError, budget_exceeded, invalid, model_not_found
from gateway.reliability.guards import circuit_open_error
from gateway.reliability.parallel import Slot
from gateway.serving.budget.budget_hold import BudgetHold
from gateway.serving.endpoint import finished, new_request_id
from gateway.serving.forwarding.upstream import UpstreamFailure, over_deployments
from gateway.serving.record.access_log import log_access
from gateway.serving.record.attribution import Attribution
from gateway.serving.response_headers import RATELIMIT_STATE
from gateway.store.records import Tenant


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


def reply_json(reply: Any) -> dict:
    """litellm's reply as the JSON object sent to the client (without its hidden params)."""
    out = reply if isinstance(reply, dict) else reply.model_dump(exclude_none=True)
    out.pop("_hidden_params", None)
    return out


class Passthrough:
    """One passthrough's record, from authentication to its log row; ``route`` is the label
    of its metrics and the row's reason (``embeddings``, ``images`` ...). ``by_tokens``: its
    input is counted in the tenant's TPM window and the token metrics (embeddings)."""

    def __init__(self, ctx: GatewayContext, tenant: Tenant, rid: str, t0: float,
                 route: str, by_tokens: bool = False) -> None:
        self.ctx, self.tenant, self.rid, self.t0, self.route = ctx, tenant, rid, t0, route
        self.by_tokens = by_tokens
        self.created_at = datetime.now(UTC)
        self.hold = BudgetHold(ctx, tenant, rid)
        self.backend: str | None = None
        self.answered = False
        self.cost_usd = 0.0
        self.prompt_tokens: int | None = None  # the input's tokens, when it has a count
        self.completion_tokens: int | None = None
        self.attempts: list[dict] = []
        self.parallel_slot: Slot | None = None  # of max_parallel_requests, when taken
        self.tpm_grant: Any = None  # tokens reserved against the tenant's TPM, when reserved

    def named(self, model: Any, mode: str) -> Backend:
        """The backend ``model`` names: known and allowed (404; the key's models: 403), of
        litellm mode ``mode`` (400)."""
        if not isinstance(model, str) or not model:
            raise invalid("'model' is required and must be a string", param="model")
        pool = self.ctx.pool.current
        name = pool.settings.resolve_alias(model)  # model_group_alias
        require_model(self.tenant, model, name)
        backend, allowed = pool.backend(name), self.tenant.policy.allowed_models
        if backend is None or backend.is_wildcard or (allowed is not None
                                                      and name not in allowed):
            raise model_not_found(name)
        if pool.modes.get(name) != mode:
            raise invalid(f"{name!r} is a model of mode {pool.modes.get(name)!r}, not "
                          f"{mode!r}", param="model", code="model_not_supported")
        self.backend = name
        return backend

    async def reserve_tokens(self, tokens: int) -> None:
        """Reserve ``tokens`` (the input's bound, counted in the units' TPM as its UTF-8 bytes)
        against the tenant's and the key's tokens per minute (429 over either); settled to
        the same count when the request ends (the input is what was sent)."""
        self.prompt_tokens = tokens
        self.tpm_grant = await self.ctx.reliability.reserve_tokens(self.tenant, tokens, tokens)

    async def call(self, backend: Backend, bound_usd: float,
                   fn: Callable[..., Awaitable[Any]], params: dict[str, Any]) -> Any:
        """``fn(**params)`` (a litellm function) over the backend's deployments, ``bound_usd``
        held first (``forward``)."""
        return await self.forward(backend, bound_usd,
                                  lambda: over_deployments(backend, fn, params, None, None))

    async def forward(self, backend: Backend, bound_usd: float,
                      send: Callable[[], Awaitable[Any]], refusal: str | None = None) -> Any:
        """Hold ``bound_usd`` (429 with ``refusal`` when the budget cannot), then ``send()``
        if the backend's circuit allows: its reply, or the upstream's error (502/503/504, or
        its 400). The attempt is recorded either way."""
        if not await self.hold.ensure(bound_usd):
            raise budget_exceeded(refusal or f"The most this {self.route} request can cost "
                                  f"(${bound_usd:.6f}) does not fit the remaining budget.")
        if not self.ctx.reliability.circuits.allow(backend.model_name):
            raise circuit_open_error(self.ctx.reliability, [backend.model_name])
        started = time.perf_counter()
        try:
            reply = await send()
        except UpstreamFailure as f:
            self._attempt(f.status, str(f), started, f)
            if f.billable:  # the provider has the request and may bill it
                self.cost_usd = self.hold.held
            raise upstream_error(f) from f
        self._attempt(200, None, started, None)
        self.answered = True
        return reply

    async def settle(self, cost_usd: float) -> dict[str, str]:
        """Settle at ``cost_usd`` (never past what was held: a bound that held) and log, before
        the client has the answer; the answer's headers."""
        self.cost_usd = min(max(0.0, cost_usd), self.hold.held)
        await self.finish(200, None)
        return {**self.headers(), "x-tollgate-cost-usd": f"{self.cost_usd:.10f}"}

    def _attempt(self, status: int, error: str | None, started: float,
                 failure: UpstreamFailure | None) -> None:
        assert self.backend is not None
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
        m.requests.labels(self.route, model or "none", str(status), "false").inc()
        m.latency.labels(self.route, "false").observe(time.perf_counter() - self.t0)
        if self.cost_usd and self.backend:
            m.cost.labels(self.backend).inc(self.cost_usd)
        if self.by_tokens or self.tpm_grant is not None:
            await self._count_tokens()
        row = self.row(status, error)
        self.ctx.log_writer.submit(row)
        log_access(row, self.tenant)

    async def _count_tokens(self) -> None:
        """The input's tokens in the token metric and the tenant's TPM window: what was used
        (nothing answered: what was held when the provider may bill it, else none)."""
        if self.answered and self.backend and self.by_tokens:
            self.ctx.metrics.tokens.labels(self.backend, "prompt").inc(self.prompt_tokens or 0)
        if self.answered or self.tpm_grant is not None:
            used = (self.prompt_tokens or 0) if self.answered else (
                self.tpm_grant.tokens if self.cost_usd else 0)
            await self.ctx.reliability.settle_tokens(self.tenant, self.tpm_grant, used)

    def row(self, status: int, error: str | None) -> dict[str, Any]:
        """The request-log row, with the chat rows' keys (docs/architecture.md)."""
        return {
            "id": self.rid, "tenant_id": self.tenant.id, "key_id": self.tenant.key_id,
            **Attribution(user_id=self.tenant.key_user_id).row_fields(),
            "created_at": self.created_at,
            "route": None, "lam": None, "router_version": None, "candidates": [],
            "equivalent": [], "reason": self.route, "stream": False, "prompt_text": None,
            "chosen_model": self.backend, "attempts": self.attempts,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd, "reserved_usd": self.hold.held,
            "latency_ms": round((time.perf_counter() - self.t0) * 1000, 3), "ttft_ms": None,
            "status": status, "error": error,
        }


Respond = Callable[[Passthrough, Request], Awaitable[Response]]


async def serve_passthrough(request: Request, route: str, respond: Respond,
                            by_tokens: bool = False) -> Response:
    """One passthrough answered by ``respond(call, request)`` after authentication, the
    tenant's and key's rate limits and a slot of their ``max_parallel_requests`` (taken before
    the body is read, so uploads in flight count as requests in flight); refusals and cancellations settle and log once
    (gateway/serving/endpoint.py ``finished``)."""
    ctx: GatewayContext = request.app.state.ctx
    t0, rid = time.perf_counter(), new_request_id()
    try:
        tenant = await authenticate(ctx, request)
    except GatewayError as e:
        ctx.metrics.requests.labels(route, "none", str(e.status), "false").inc()
        return e.response({"x-tollgate-request-id": rid})
    call = Passthrough(ctx, tenant, rid, t0, route, by_tokens)

    async def work() -> Response:
        setattr(request.state, RATELIMIT_STATE, await ctx.reliability.admit(tenant))
        # the slot before the body is read: an upload in flight is a request in flight
        call.parallel_slot = await ctx.reliability.take_slot(tenant, rid)
        return await respond(call, request)

    return await finished(call, work)
