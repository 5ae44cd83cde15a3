"""Request parameters that carry fees outside token prices: priced, or refused (issue 24).

A budget reserves N_prompt·p_in + n·m·p_out (gateway/pricing.py); a parameter that makes the
provider bill something else would let a tenant spend what it never reserved. Each one found
in litellm's provider mappings and price map (litellm/llms/*/chat/transformation.py,
model_prices_and_context_window.json), and what the gateway does with it:

- ``service_tier``: "auto", "default" (OpenAI's names for the standard tier) and "standard"
  are served at the standard price, as litellm prices them (cost_calculator.py
  ``_normalize_service_tier``). Any other tier ("flex", "priority", ...) is **priced** where
  litellm's map gives the backend's price at that tier (``input_cost_per_token_priority``,
  ``output_cost_per_token_flex`` ...: gateway/pricing.py ``tier_price``): reserved at the
  dearer of the standard and the tier rates, settled by litellm's ``cost_per_token`` with
  that ``service_tier``. Backends without such a price are left out of the request's
  candidates; none left: 400 naming ``service_tier`` (e.g. a config-priced backend, or
  "scale", which the map does not price).
- ``web_search_options``: **refused** (400). litellm turns it into Anthropic's ``web_search``
  server tool with ``max_uses`` up to 10 (anthropic/chat/transformation.py
  ``ANTHROPIC_WEB_SEARCH_TOOL_MAX_USES``), Gemini's ``googleSearch`` grounding
  (gemini/chat/transformation.py ``_map_web_search_options``), or passes it to OpenAI's
  search models; each search is billed per query (the map's ``search_context_cost_per_query``,
  $0.01-0.05 a query), a count the request does not bound and the usage the gateway settles
  from does not carry.
- ``tools`` entries that are not functions (Anthropic's ``web_search_20250305``,
  ``code_execution_*``, Gemini's ``googleSearch`` / ``codeExecution`` / ``urlContext``,
  OpenAI's hosted tools): **refused** (400): server tools billed per use or per session
  (``code_interpreter_cost_per_session``, ``file_search_cost_per_1k_calls``,
  ``google_maps_grounding_cost_per_query``), outside token prices.
- ``audio`` and ``modalities`` with "audio": **refused** (400). Audio output is billed per
  audio token (``output_cost_per_audio_token``, e.g. 8x gpt-4o-audio-preview's text rate),
  which the reservation's p_out does not bound and the settlement would price as text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from gateway.errors import GatewayError, invalid
from gateway.pool import Pool
from gateway.pricing import dearest, tier_price

STANDARD_TIERS = frozenset({"auto", "default", "standard"})  # standard prices


def refuse_fee_params(params: Mapping[str, Any]) -> None:
    """400 naming the first parameter whose fees the gateway cannot price (module
    docstring)."""
    if "web_search_options" in params:
        raise invalid(
            "'web_search_options' is not supported: web searches are billed per query, "
            "outside token prices, and a request does not bound how many it makes, so its "
            "cost cannot be reserved against a budget.", param="web_search_options",
            code="unsupported_parameter")
    for i, tool in enumerate(params.get("tools") or ()):
        kind = tool.get("type", "function") if isinstance(tool, dict) else None
        if isinstance(tool, dict) and kind != "function":
            raise invalid(
                f"'tools[{i}]': tool type {kind!r} is not supported: provider-side tools "
                "(web search, code execution, grounding) are billed per use, outside token "
                "prices; only function tools are served.", param=f"tools[{i}].type",
                code="unsupported_parameter")
    modalities = params.get("modalities")
    if "audio" in params or (isinstance(modalities, list) and "audio" in modalities):
        name = "audio" if "audio" in params else "modalities"
        raise invalid(
            f"'{name}': audio output is not supported: it is billed per audio token, at a "
            "price the budget's reservation does not bound.", param=name,
            code="unsupported_parameter")


def billable_tier(params: Mapping[str, Any]) -> str | None:
    """The request's ``service_tier`` when it is priced apart from the standard tier."""
    tier = params.get("service_tier")
    if not isinstance(tier, str) or tier.lower() in STANDARD_TIERS:
        return None
    return tier.lower()


def tier_pool(pool: Pool, tier: str) -> Pool:
    """``pool`` priced at ``tier``: each backend whose every deployment litellm prices at
    that tier, at the tier's price; the others are left out (unpriced, so no route ranks
    them and no attempt reserves for them)."""
    prices, per_deployment = {}, {}
    for name, price in pool.prices.items():
        each = pool.deployment_prices.get(name)
        if each is not None:
            tiered = [tier_price(p, tier) for p in each]
            if None in tiered:
                continue
            per_deployment[name] = tuple(tiered)
            prices[name] = dearest([p for p in tiered if p is not None])
        elif (tp := tier_price(price, tier)) is not None:
            prices[name] = tp
    experts = {route: tuple((e, b) for e, b in pairs if b in prices)
               for route, pairs in pool.route_experts.items()}
    return replace(pool, prices=MappingProxyType(prices),
                   deployment_prices=MappingProxyType(per_deployment),
                   route_experts=MappingProxyType(experts))


def tier_unpriced(tier: str, names: list[str]) -> GatewayError:
    """400: no candidate of this request has a known price at ``tier``."""
    return invalid(
        f"service_tier {tier!r} has no known price for {', '.join(names) or 'any backend'}: "
        "the gateway cannot reserve what it would cost. Use service_tier 'auto' or 'default', "
        "or a model whose price at this tier litellm's price map gives.",
        param="service_tier", code="unsupported_value")
