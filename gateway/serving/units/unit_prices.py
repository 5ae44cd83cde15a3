"""Prices of the backends billed by the unit, not by the token: images, speech, transcription,
moderation and rerank, each read as litellm reads it.

A deployment's price is its ``model_info`` field when the config gives it (LiteLLM's custom
pricing keys), else litellm's model map for its ``model_info.base_model`` or litellm model:
- image generation: litellm's own ``default_image_cost_calculator`` for the size, quality and
  n asked (``input_cost_per_image``, ``output_cost_per_image`` or ``input_cost_per_pixel``),
  the dearest option when one is left out or ``auto``, plus the prompt's text tokens; a reply
  that reports gpt-image ``usage`` is settled at its token prices (``*_image_token``);
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

from gateway.config import Backend
from gateway.config.model_map import map_entry
from gateway.errors import GatewayError
from gateway.provider import litellm_maps

IMAGE = "image_generation"
SPEECH, TRANSCRIPTION = "audio_speech", "audio_transcription"
MODERATION, RERANK = "moderation", "rerank"
FIELD = {SPEECH: "input_cost_per_character", TRANSCRIPTION: "input_cost_per_second",
         MODERATION: "input_cost_per_token", RERANK: "input_cost_per_query"}
IMAGE_FIELDS = ("input_cost_per_image", "output_cost_per_image", "input_cost_per_pixel")
# gpt-image's quality and size options (OpenAI's images API reference); its default for both
# is "auto", which may render at any of them. None: the model's own default entry (dall-e's).
QUALITIES = (None, "high", "medium", "low")
SIZES = ("1024x1024", "1024x1536", "1536x1024")


def unpriced(backend: Backend, what: str) -> GatewayError:
    return GatewayError(400, f"backend {backend.model_name!r} has no {what}: its cost cannot be "
                        f"bounded before it is called; set model_info.{what} in its "
                        "model_list entry", "invalid_request_error", code="backend_unpriced",
                        param="model")


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


def _options(value: str | None, choices: tuple[str | None, ...]) -> tuple[str | None, ...]:
    """The values an option may take: the one asked, or any of ``choices`` when it is left
    out or ``auto`` (the provider picks)."""
    return choices if value in (None, "auto") else (value,)


def _image_price(model: str, provider: str | None, own: dict[str, Any], n: int,
                 size: str | None, quality: str | None) -> float | None:
    """litellm's price of ``n`` images of one size and quality (None: it has none)."""
    try:
        price = litellm_maps.image_price(model, provider, quality, n, size or "1024x1024",
                                         own or None)
    except Exception:  # noqa: BLE001 - litellm raises a bare Exception when unpriced
        return None
    return price if price or own else None  # litellm's 0 is no price; only the config's 0 is free


def image_cost(backend: Backend, n: int, size: str | None, quality: str | None,
               prompt_bytes: int = 0) -> float:
    """The most ``n`` images can cost (issue 48.4), the dearest deployment's: litellm's image
    price at the dearest size and quality the request allows (left out or ``auto``: any of
    gpt-image's, ``QUALITIES`` × ``SIZES``; litellm prices a left-out quality at the cheapest,
    $0.009 against high's $0.133 for gpt-image-1.5), plus the prompt's text tokens (bounded by
    its UTF-8 bytes) at ``input_cost_per_token`` where the model bills them (gpt-image does).
    A 400 when a deployment has no per-image or per-pixel price for any of them."""
    costs = []
    for (own, mapped), params in zip(_deployments(backend), backend.deployment_params(),
                                     strict=True):
        model = str(params.get("model"))
        try:
            provider = litellm_maps.llm_provider(model)
        except Exception:  # noqa: BLE001 - an unknown provider: look the model up as it is
            provider = None
        prices = [p for q in _options(quality, QUALITIES) for sz in _options(size, SIZES)
                  if (p := _image_price(model, provider, own, n, sz, q)) is not None]
        if not prices:
            raise unpriced(backend, " or ".join(IMAGE_FIELDS) + f" for size {size!r}"
                           f"{f' and quality {quality!r}' if quality else ''}")
        text = prompt_bytes * (_field(own, mapped, "input_cost_per_token") or 0.0)
        costs.append(max(prices) + text)
    return max(costs)


def image_usage_cost(backend: Backend, usage: Any) -> float | None:
    """USD of a gpt-image reply's ``usage`` (OpenAI's ImagesResponse.usage: ``input_tokens``
    with ``input_tokens_details`` {text_tokens, image_tokens}, ``output_tokens`` = image
    tokens out, or split by ``output_tokens_details``) at the dearest deployment's token
    prices; None when there is no usage or no token price to read it with."""
    if not isinstance(usage, dict) or not isinstance(usage.get("output_tokens"), int):
        return None
    d_in = usage.get("input_tokens_details") or {}
    d_out = usage.get("output_tokens_details") or {}
    counts = {
        "input_cost_per_token": d_in.get("text_tokens", usage.get("input_tokens") or 0),
        "input_cost_per_image_token": d_in.get("image_tokens") or 0,
        "output_cost_per_image_token": d_out.get("image_tokens", usage["output_tokens"]),
        "output_cost_per_token": d_out.get("text_tokens") or 0,
    }
    costs = []
    for own, mapped in _deployments(backend):
        if _field(own, mapped, "output_cost_per_image_token") is None:
            return None
        costs.append(sum(max(0, int(c or 0)) * (_field(own, mapped, f) or 0.0)
                         for f, c in counts.items()))
    return max(costs) if costs else None
