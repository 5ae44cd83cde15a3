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
limits, circuit breakers, the record (``Outcome``), the request log, the access line and the
trace are every endpoint's (gateway/serving/endpoint.py); naming the backend, the call and
settling are every named call's (gateway/serving/named_call.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from gateway.config import Backend
from gateway.errors import GatewayError
from gateway.pool import Pool
from gateway.price_like import unpriced_fix
from gateway.pricing import Price
from gateway.serving.budget.bound_factors import held_out_error, widened, widened_price
from gateway.serving.embeddings.embeddings_request import (
    EmbeddingsRequest,
    parse_embeddings_request,
)
from gateway.serving.endpoint import serve_unit
from gateway.serving.named_call import call_provider, settled
from gateway.serving.plan.backend_named import unit_backend
from gateway.serving.record.outcome import Outcome
from gateway.serving.record.usage import clamped, reported_tokens
from gateway.serving.request.validation import json_body
from gateway.store.records import Tenant

EMBEDDING = "embedding"  # litellm's mode of an embedding model (gateway/pool/modes.py)
ROUTE = "embeddings"  # the route label of the metrics and the log row's reason
REFUSAL = "The predicted cost of these embeddings does not fit the remaining budget."


def embedding_backend(pool: Pool, tenant: Tenant, req: EmbeddingsRequest) -> Backend:
    """The named backend (backend_named.py ``unit_backend``: 403, 404, 400), priced (503)."""
    backend = unit_backend(pool, tenant, req.model, EMBEDDING)
    if backend.model_name not in pool.prices:
        raise GatewayError(503, f"backend {backend.model_name!r} has no price: "
                           f"{unpriced_fix(backend)}", "service_unavailable",
                           code="backend_unpriced")
    return backend


async def embed_story(out: Outcome, request: Request) -> Response:
    """One embeddings request after authentication and the rate limit, top to bottom."""
    ctx, tenant = out.ctx, out.tenant
    req = parse_embeddings_request(await json_body(request))
    pool = ctx.pool.current  # one pool for the whole request
    backend = out.naming(embedding_backend(pool, tenant, req))
    name, price = backend.model_name, pool.prices[backend.model_name]
    f = ctx.bound_factors.factor(name)
    if ctx.bound_factors.held_out(name, tenant.principal):
        raise held_out_error(name)
    bound = widened(req.token_bound(), f)
    await out.reserve_input(bound, bound=bound)
    resp: Any = await call_provider(out, backend, widened_price(price, f).cost(bound, 0),
                                    "embedding", {**req.params, "input": req.input}, REFUSAL)
    usage = getattr(resp, "usage", None)  # litellm's EmbeddingResponse
    reported = reported_tokens(getattr(usage, "prompt_tokens", None))
    tokens, cost, overrun = usage_cost(reported, bound, price)
    headers = await settled(out, backend, cost, overrun, (tokens, 0), reported)
    body: dict[str, Any] = resp.model_dump()
    body["model"] = name
    return JSONResponse(body, headers=headers)


def usage_cost(reported: int | None, bound: int, price: Price) -> tuple[int, float, float]:
    """(tokens, cost, overrun) of the reported count clamped to the bound (none reported: the
    bound); what lies past it is the operator's overrun (gateway/serving/record/usage.py) and
    teaches the backend's factor when the request settles."""
    tokens, excess = clamped(reported, bound) if reported else (bound, 0)
    return tokens, price.cost(tokens, 0), price.cost(excess, 0) if excess else 0.0


async def embeddings(request: Request) -> Response:
    """OpenAI's embeddings endpoint."""
    return await serve_unit(request, ROUTE, embed_story, by_tokens=True)
