"""``GET /v1/models`` and ``/v1/models/{id}``: the routes and backends a tenant may use.

Each route says how it decides: a promise (``rule: "promise"``, its reference, drop and the
reference's mean p̂; ``promise_by_default`` when the config named no drop: a config without
``routes:`` gets auto, auto-balanced and auto-cheap, gateway/config/routes.py) or a λ trade
(``rule: "cost_weight"``, with the explore_share that bounds its cold-start priors). Each
backend says how the router knows it and its prices.

Never a 500 for a number: a value that is not finite (a rule's z = ∞, meaning "the
reference only"; a price litellm cannot give) leaves as JSON ``null``, since
``JSONResponse`` refuses NaN and ∞ ("Out of range float values are not JSON compliant").
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from gateway.auth import authenticate, may_use_model
from gateway.context import GatewayContext
from gateway.errors import GatewayError, model_not_found
from gateway.pool import Pool
from gateway.pool.exploring import exploring
from gateway.pool.promise import RoutePromise
from gateway.serving.request.anthropic_errors import anthropic_error
from gateway.store.records import Tenant


def json_safe(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


ANTHROPIC_PAGE_DEFAULT, ANTHROPIC_PAGE_MAX = 20, 1000  # Anthropic's models.list: limit 1-1000
EPOCH_ISO = "1970-01-01T00:00:00Z"  # created_at of a route or backend (no release date known)


async def list_models(request: Request) -> Response:
    """Route names (routed) and backends (passthrough) this tenant may use; in Anthropic's
    shape when the request carries ``anthropic-version`` (``anthropic_models``)."""
    ctx: GatewayContext = request.app.state.ctx
    try:
        tenant = await authenticate(ctx, request)
    except GatewayError as e:
        if "anthropic-version" in request.headers:
            return anthropic_error(e, {})
        return e.response()
    entries = model_entries(ctx, tenant)
    if "anthropic-version" in request.headers:
        return anthropic_models(entries, request.query_params)
    return JSONResponse(json_safe({"object": "list", "data": entries}))


def anthropic_models(entries: list[dict[str, Any]], query: Any) -> Response:
    """Anthropic's ``GET /v1/models`` page: ``data`` of {type, id, display_name, created_at},
    ``has_more``, ``first_id``, ``last_id``; ``limit`` (1-1000, default 20), ``after_id`` and
    ``before_id`` as Anthropic pages (https://docs.anthropic.com/en/api/models-list). Claude
    Code discovers models here (``GET /v1/models?limit=1000``, keeping ids that start with
    ``claude`` or ``anthropic``: https://code.claude.com/docs/en/llm-gateway-protocol)."""
    raw = query.get("limit")
    try:
        limit = ANTHROPIC_PAGE_DEFAULT if raw is None else int(raw)
        if not 1 <= limit <= ANTHROPIC_PAGE_MAX:
            raise ValueError
    except ValueError:
        return anthropic_error(GatewayError(
            400, f"limit: must be an integer from 1 to {ANTHROPIC_PAGE_MAX}, got {raw!r}",
            "invalid_request_error", param="limit"), {})
    ids = [e["id"] for e in entries]
    start, end = 0, len(ids)
    if query.get("after_id") in ids:
        start = ids.index(query["after_id"]) + 1
    if query.get("before_id") in ids:
        end = ids.index(query["before_id"])
        start = max(start, end - limit)
    page = ids[start:end][:limit]
    data = [anthropic_model(i) for i in page]
    return JSONResponse({"data": data, "has_more": start + len(page) < end,
                         "first_id": page[0] if page else None,
                         "last_id": page[-1] if page else None})


async def retrieve_model(request: Request, model_id: str) -> Response:
    """One entry of /v1/models (OpenAI's ``models.retrieve``; Anthropic's ``models.retrieve``
    shape when the request carries ``anthropic-version``); 404 in the same wire's shape."""
    ctx: GatewayContext = request.app.state.ctx
    anthropic = "anthropic-version" in request.headers
    try:
        tenant = await authenticate(ctx, request)
    except GatewayError as e:
        return anthropic_error(e, {}) if anthropic else e.response()
    for entry in model_entries(ctx, tenant):
        if entry["id"] == model_id:
            if anthropic:
                return JSONResponse(anthropic_model(model_id))
            return JSONResponse(json_safe(entry))
    missing = model_not_found(model_id)
    return anthropic_error(missing, {}) if anthropic else missing.response()


def anthropic_model(model_id: str) -> dict[str, str]:
    """One model in Anthropic's shape (a route or backend: no release date known)."""
    return {"type": "model", "id": model_id, "display_name": model_id,
            "created_at": EPOCH_ISO}


def model_entries(ctx: GatewayContext, tenant: Tenant) -> list[dict[str, Any]]:
    allowed = tenant.policy.allowed_models
    pool = ctx.pool.current
    learning = exploring(pool)
    data: list[dict[str, Any]] = []
    for name, route in pool.routes.items():
        if not may_use_model(tenant, name):  # the calling key's ``models`` list
            continue
        promise = pool.promises.get(name)
        data.append({
            "id": name, "object": "model", "created": 0, "owned_by": "tollgate",
            "tollgate": {"type": "route",
                         "rule": "cost_weight" if route.max_drop is None else "promise",
                         "cost_weight": route.cost_weight if route.max_drop is None else None,
                         "explore_share": route.explore_share if route.max_drop is None
                         else None,
                         "promise_by_default": route.promise_by_default,
                         "description": route.description,
                         "backends": sorted(pool.deployable(name, allowed).values()),
                         "promise": promise_entry(pool, promise),
                         "learning": learning.entry(pool, name)},
        })
    for k in pool.known.values():
        if (allowed is not None and k.backend not in allowed) or not may_use_model(
                tenant, k.backend):
            continue
        p = pool.prices.get(k.backend)
        data.append({
            "id": k.backend, "object": "model", "created": 0, "owned_by": "tollgate",
            "tollgate": {"type": "backend", "router_model": k.expert,
                         "routable": k.expert is not None, "known_as": k.status,
                         "quality_known": pool.how_known(k.backend),
                         "input_cost_per_token": p.input_per_token if p else None,
                         "output_cost_per_token": p.output_per_token if p else None,
                         "deployments": len(pool.backends[k.backend].deployment_params())},
        })
    return data


def promise_entry(pool: Pool, promise: RoutePromise | None) -> dict[str, Any] | None:
    """A route's promise: drop, reference (and why it, its mean p̂), the rule's z (null: ∞,
    the reference only) and per-prompt tolerance."""
    if promise is None:
        return None
    quality = pool.qualities.get(pool.expert_of(promise.reference) or "")
    return {"max_drop": promise.max_drop, "reference": promise.reference,
            "reference_chosen": promise.reference_chosen,
            "reference_mean_p": None if quality is None else round(quality.level, 4),
            "z": promise.z, "tolerance": promise.tolerance}
