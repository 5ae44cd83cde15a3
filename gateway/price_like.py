"""Where a backend's price comes from, and what to write when it has none.

litellm's price map drops models it no longer lists (``anthropic/claude-3-5-sonnet-20241022``
is absent from the map bundled with litellm 1.110.2, the version locked here): a config that
named one would then be refused on every call after an upgrade. An entry keeps working when it says how it is priced:
- ``model_info`` prices (``input/output_cost_per_token`` or ``..._per_million``);
- ``model_info.base_model: MODEL`` (LiteLLM's key): priced, recognised and typed as MODEL;
- ``model_info.price_like: MODEL`` (Tollgate's): priced as MODEL in litellm's map, nothing
  else borrowed (the router still knows the backend by its own name).
The startup block names the borrowed price; without any of them a request is a 503 whose
message names these fixes (``unpriced_fix``).
"""

from __future__ import annotations

from gateway.config import Backend, ModelInfo


def borrowed_model(info: ModelInfo) -> str | None:
    """The map entry a deployment is priced as: its ``base_model``, else its ``price_like``."""
    extra = info.model_extra or {}
    for key in ("base_model", "price_like"):
        if isinstance(extra.get(key), str) and extra[key]:
            return str(extra[key])
    return None


def price_origin(b: Backend) -> str:
    """How the first deployment of ``b`` is priced, for the startup block."""
    info = b.deployment_infos()[0]
    if info.input_cost_per_token is not None or info.input_cost_per_million is not None:
        return "model_info prices"
    extra = info.model_extra or {}
    for key in ("base_model", "price_like"):
        if extra.get(key):
            return f"priced as {extra[key]} ({key})"
    return "litellm's price map"


def unpriced_fix(b: Backend) -> str:
    """The sentence that says how to price ``b`` (the 503 ``backend_unpriced`` and the
    startup warning)."""
    like = (b.model_info.model_extra or {}).get("price_like") or (
        b.model_info.model_extra or {}).get("base_model")
    told = (f"; its model_info names {like!r}, which litellm's price map does not price either"
            if like else "")
    return (f"litellm's price map does not price {b.litellm_model!r} (it lists no price, "
            f"or 0 in and 0 out, which is not taken as free){told}. Fix: set its "
            "model_info input_cost_per_million and output_cost_per_million, or "
            "model_info.price_like: a model litellm prices the same (e.g. "
            "claude-sonnet-4-5 for a retired Claude Sonnet)")
