"""LiteLLM Proxy's ``GET /model/info`` (and ``/v1/model/info``), on the admin (LiteLLM master)
key: every deployment of ``model_list`` with its prices, mode and how the router knows it.

    ?litellm_model_id=   one deployment (its ``model_info.id``)

Each entry is LiteLLM's ``{"model_name", "litellm_params", "model_info"}``: ``litellm_params``
without credentials (only the keys in ``SHOWN_PARAMS``: never ``api_key``, tokens, secrets or
an ``os.environ/`` reference's value); ``model_info`` with ``id`` (stable per deployment),
``mode``, ``input_cost_per_token`` / ``output_cost_per_token`` (the price the deployment is
settled at; null when it has none, and requests naming it are refused), ``max_input_tokens``,
``max_output_tokens``, ``litellm_provider``, ``base_model``; and under ``tollgate`` what
LiteLLM has no field for: the routes that may choose it, how its quality is known (trained,
prior, ...), where its price comes from (gateway/price_like.py).
"""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi import APIRouter, Depends, Request

from gateway.admin.api import OpenAIErrorRoute, require_admin
from gateway.config import Backend
from gateway.errors import GatewayError
from gateway.pool import Pool
from gateway.price_like import price_origin

SHOWN_PARAMS = ("model", "api_base", "api_version", "custom_llm_provider", "region_name",
                "timeout", "stream_timeout", "rpm", "tpm", "weight", "order",
                "max_parallel_requests", "drop_params")


def deployment_id(b: Backend, index: int) -> str:
    """A deployment's stable id (LiteLLM hashes its params; these are names, not secrets)."""
    seed = f"{b.model_name}\x00{index}\x00{b.deployment_params()[index].get('model')}"
    return hashlib.sha256(seed.encode()).hexdigest()[:32]


def _entries(pool: Pool, b: Backend) -> list[dict[str, Any]]:
    routes = [name for name, pairs in pool.route_experts.items()
              if any(backend == b.model_name for _, backend in pairs)]
    known = pool.known.get(b.model_name)
    out = []
    for i, (params, info) in enumerate(zip(b.deployment_params(), b.deployment_infos(),
                                           strict=True)):
        price = (pool.answer_price(b.model_name, i) if b.model_name in pool.prices else None)
        model = str(params.get("model", ""))
        extra = info.model_extra or {}
        out.append({
            "model_name": b.model_name,
            "litellm_params": {k: params[k] for k in SHOWN_PARAMS
                               if k in params and not str(params[k]).startswith("os.environ/")},
            "model_info": {
                "id": deployment_id(b, i), "db_model": False, "key": model,
                "mode": pool.modes.get(b.model_name),
                "input_cost_per_token": price.input_per_token if price else None,
                "output_cost_per_token": price.output_per_token if price else None,
                "max_input_tokens": info.max_input_tokens,
                "max_output_tokens": info.max_output_tokens,
                "max_tokens": info.max_output_tokens,
                "litellm_provider": model.split("/", 1)[0] if "/" in model else "openai",
                "base_model": extra.get("base_model"),
            },
            "tollgate": {
                "routes": routes,
                "known_as": known.status if known else None,
                "quality": pool.how_known(b.model_name),
                "price_source": (price_origin(b) if price else
                                 "per model a request names (wildcard)" if b.is_wildcard
                                 else "none: requests are refused (backend_unpriced)"),
            },
        })
    return out


def build_router() -> APIRouter:
    r = APIRouter(tags=["models"], route_class=OpenAIErrorRoute,
                  dependencies=[Depends(require_admin)])

    @r.get("/model/info")
    @r.get("/v1/model/info")
    async def model_info(request: Request, litellm_model_id: str | None = None
                         ) -> dict[str, Any]:
        ctx = getattr(request.app.state, "ctx", None)
        if ctx is None:
            raise GatewayError(503, "the gateway has no model pool", "server_error")
        pool: Pool = ctx.pool.current
        data = [e for b in pool.settings.model_list for e in _entries(pool, b)]
        if litellm_model_id is not None:
            data = [e for e in data if e["model_info"]["id"] == litellm_model_id]
            if not data:
                raise GatewayError(404, f"Model id = {litellm_model_id} not found",
                                   code="not_found", param="litellm_model_id")
        return {"data": data}

    return r
