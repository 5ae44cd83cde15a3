"""POST /v1/embeddings: authenticate → admit → parse → reserve → embed → settle → log.

A passthrough to the named backend (a group's deployments tried as for chat), which must be an
embedding backend (``model_info.mode``, else litellm's model map: gateway/pool/modes.py) the
tenant's policy allows. Money and tokens as on chat completions: the input's token bound
(UTF-8 bytes, one per token id, plus each input's framing tokens:
gateway/serving/embeddings/embeddings_request.py; × the backend's learned factor,
gateway/serving/budget/bound_factors.py) is reserved against the tenant's TPM at admission and, ×
the input price, against its budget; settled at the reported usage, clamped to that bound before
anything is written (the rest is the operator's overrun), before the response is sent; an attempt
that timed out after sending may be billed by the provider, so it is charged what was held. Rate
limits, circuit breakers, the request log and the access line are the chat endpoint's; the record,
the attempt and settling are every passthrough's (gateway/serving/passthrough.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from gateway.auth import require_model
from gateway.config import Backend
from gateway.errors import GatewayError, invalid, model_not_found
from gateway.pool import Pool
from gateway.price_like import unpriced_fix
from gateway.pricing import Price
from gateway.serving.budget.bound_factors import (
    ABSURD_FACTOR,
    held_out_error,
    widened,
    widened_price,
)
from gateway.serving.embeddings.embeddings_request import (
    EmbeddingsRequest,
    parse_embeddings_request,
)
from gateway.serving.forwarding.upstream import embed
from gateway.serving.passthrough import Passthrough, serve_passthrough
from gateway.serving.record.outcome import reported_tokens
from gateway.serving.request.validation import json_body
from gateway.store.records import Tenant

ROUTE = "embeddings"  # the route label of the metrics and the log row's reason
REFUSAL = "The predicted cost of these embeddings does not fit the remaining budget."


def embedding_backend(pool: Pool, tenant: Tenant, req: EmbeddingsRequest) -> Backend:
    """The named backend: known and allowed (404), of embedding mode (400), priced (503)."""
    allowed = tenant.policy.allowed_models
    model = pool.settings.resolve_alias(req.model)  # model_group_alias
    require_model(tenant, req.model, model)  # the calling key's models (403)
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


async def embed_story(call: Passthrough, request: Request) -> Response:
    """One embeddings request after authentication and the rate limit, top to bottom."""
    ctx, tenant = call.ctx, call.tenant
    req = parse_embeddings_request(await json_body(request))
    pool = ctx.pool.current  # one pool for the whole request
    backend = embedding_backend(pool, tenant, req)
    call.backend, price = backend.model_name, pool.prices[backend.model_name]
    f = ctx.bound_factors.factor(call.backend)
    if ctx.bound_factors.held_out(call.backend, tenant.principal):
        raise held_out_error(call.backend)
    bound = widened(req.token_bound(), f)
    call.tpm_grant = await ctx.reliability.reserve_tokens(tenant, bound, bound)
    resp = await call.forward(backend, widened_price(price, f).cost(bound, 0),
                              lambda: embed(backend, req.input, req.params), REFUSAL)
    usage = getattr(resp, "usage", None)  # litellm's EmbeddingResponse
    cost = take_usage(call, reported_tokens(getattr(usage, "prompt_tokens", None)), bound,
                      price)
    headers = await call.settle(cost)  # settled before the client has the answer
    body: dict[str, Any] = resp.model_dump()
    body["model"] = call.backend
    return JSONResponse(body, headers=headers)


def take_usage(call: Passthrough, reported: int | None, bound: int, price: Price) -> float:
    """The cost of the reported count, clamped to the bound (none reported: the bound); what
    lies past it (at most ``ABSURD_FACTOR`` × the bound) is the operator's overrun, and
    teaches the backend's factor (gateway/serving/budget/bound_factors.py)."""
    call.prompt_tokens, call.completion_tokens = min(reported, bound) if reported else bound, 0
    cost = price.cost(call.prompt_tokens, 0)
    if reported is None or reported <= bound:
        return cost
    excess = min(reported, int(ABSURD_FACTOR * max(bound, 1))) - bound
    overrun_usd = price.cost(excess, 0)
    call.ctx.bound_factors.reported(call.backend, reported / max(bound, 1),
                                    call.tenant.principal)
    m = call.ctx.metrics
    m.overruns.inc()
    m.overrun_usd.inc(overrun_usd)
    m.overrun_by_backend.labels(call.backend).inc(overrun_usd)
    call.attempts[-1]["overrun_usd"] = overrun_usd
    return cost


async def embeddings(request: Request) -> Response:
    """OpenAI's embeddings endpoint."""
    return await serve_passthrough(request, ROUTE, embed_story, by_tokens=True)
