"""Prices of the backends billed by the unit, not by the token: images, speech, transcription,
moderation and rerank, each read as litellm reads it.

A deployment's price is its ``model_info`` field when the config gives it (LiteLLM's custom
pricing keys), else litellm's model map for its ``model_info.base_model`` or litellm model:
- image generation: litellm's own ``default_image_cost_calculator`` for the size, quality and
  n asked (``input_cost_per_image``, ``output_cost_per_image`` or ``input_cost_per_pixel``);
- speech: ``input_cost_per_character`` (OpenAI bills tts-1 by input character);
- transcription: ``input_cost_per_second`` (whisper-1 is billed by audio second);
- moderation: ``input_cost_per_token`` (0 for OpenAI's moderation models, which are free);
- rerank: ``input_cost_per_query`` (Cohere bills per search unit: a query over up to 100
  documents, a document longer than 500 tokens counting once per 500-token chunk;
  https://docs.cohere.com/docs/rerank-overview#pricing).
A group of deployments is priced at its dearest deployment (the reservation must hold
whichever answers). No price at all is a 400 naming the field to set: a budget cannot bound
what it does not know the price of (models priced by token, e.g. gpt-image-1 or
gpt-4o-mini-tts, are among them until the config gives the unit price).
"""

from __future__ import annotations

from typing import Any

from gateway.config import Backend, ModelInfo
from gateway.errors import GatewayError
from router_core.env.litellm_env import litellm

IMAGE = "image_generation"
SPEECH, TRANSCRIPTION = "audio_speech", "audio_transcription"
MODERATION, RERANK = "moderation", "rerank"
FIELD = {SPEECH: "input_cost_per_character", TRANSCRIPTION: "input_cost_per_second",
         MODERATION: "input_cost_per_token", RERANK: "input_cost_per_query"}
IMAGE_FIELDS = ("input_cost_per_image", "output_cost_per_image", "input_cost_per_pixel")


def unpriced(backend: Backend, what: str) -> GatewayError:
    return GatewayError(400, f"backend {backend.model_name!r} has no {what}: its cost cannot be "
                        f"bounded before it is called; set model_info.{what} in its "
                        "model_list entry", "invalid_request_error", code="backend_unpriced",
                        param="model")


def _lookup(model: str) -> dict[str, Any] | None:
    try:
        return dict(litellm.get_model_info(model))
    except Exception:  # noqa: BLE001 - litellm raises a bare Exception for unknown models
        return None


def map_entry(info: ModelInfo, params: dict[str, Any]) -> dict[str, Any]:
    """litellm's map entry for a deployment (its base_model's, else its model's), or {}."""
    extra = info.model_extra or {}
    for name in (extra.get("base_model"), params.get("model")):
        entry = _lookup(str(name)) if name else None
        if entry is not None:
            return entry
    return {}


def _deployments(backend: Backend) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(the deployment's own price fields, litellm's map entry) per deployment."""
    return [({k: v for k, v in (info.model_extra or {}).items() if "cost" in k},
             map_entry(info, params))
            for info, params in zip(backend.deployment_infos(), backend.deployment_params(),
                                    strict=True)]


def _field(own: dict[str, Any], mapped: dict[str, Any], field: str,
           map_zero: bool = False) -> float | None:
    """The config's price (0 included: the operator said so), else litellm's map's above 0:
    a 0 there is no price (no backend is billed at $0 unless the operator says so), except
    where ``map_zero`` says the map's 0 is the provider's price (moderation: OpenAI's
    moderation models are listed at 0 in litellm's map, and served free as before)."""
    v = own.get(field)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
        return float(v)
    v = mapped.get(field)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and (v > 0 or map_zero and v == 0):
        return float(v)
    return None


def unit_price(backend: Backend, mode: str) -> float:
    """USD per unit of ``mode`` (speech, transcription, moderation, rerank: module
    docstring), the dearest deployment's; a 400 when a deployment has none."""
    field, prices = FIELD[mode], []
    for own, mapped in _deployments(backend):
        price = _field(own, mapped, field, map_zero=mode == MODERATION)
        if price is None:
            raise unpriced(backend, field)
        prices.append(price)
    return max(prices)


def image_cost(backend: Backend, n: int, size: str | None, quality: str | None) -> float:
    """USD of ``n`` images of ``size`` and ``quality`` by litellm's image cost calculator,
    the dearest deployment's; a 400 when a deployment has no per-image or per-pixel price."""
    costs = []
    for (own, _), params in zip(_deployments(backend), backend.deployment_params(),
                                strict=True):
        model = str(params.get("model"))
        try:
            _, provider, _, _ = litellm.get_llm_provider(model)
        except Exception:  # noqa: BLE001 - an unknown provider: look the model up as it is
            provider = None
        try:
            cost = litellm.cost_calculator.default_image_cost_calculator(
                model=model, custom_llm_provider=provider, quality=quality, n=n,
                size=size or "1024x1024", model_info=own or None)
        except Exception as e:  # litellm raises a bare Exception when unpriced
            raise unpriced(backend, " or ".join(IMAGE_FIELDS) + f" for size {size!r}"
                           f"{f' and quality {quality!r}' if quality else ''}") from e
        if not cost and not own:  # litellm's 0 is no price; only the config's 0 is free
            raise unpriced(backend, " or ".join(IMAGE_FIELDS) + f" for size {size!r}")
        costs.append(float(cost))
    return max(costs)
