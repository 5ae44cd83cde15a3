"""Prices per backend, the cost a request reserves, and the cost it settles.

Reserved cost (what the budget holds before forwarding), a bound, not an estimate:
    ĉ = N_prompt · p_in + n_out_max · p_out
N_prompt the prompt-token bound of gateway/prompt_tokens.py, n_out_max the output cap (or
max_output_tokens). A price of 0 in and 0 out from litellm's map is no price (the backend is
refused, 503 ``backend_unpriced``): only a config's own 0 bills a backend at $0.
Actual cost (what is settled):
    c = usage.prompt_tokens · p_in + usage.completion_tokens · p_out
at the answering deployment's price (litellm's ``cost_per_token`` for a map price, never above
the formula at the reservation's tier rates). Prices: config.yaml's ``model_info``, else
litellm's map for ``base_model`` or ``price_like`` (gateway/price_like.py), else its model's;
a group reserves at its dearest deployment's, rate by rate (``dearest``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from gateway.config import Backend, ConfigError, ModelInfo, Settings
from gateway.config.backend import per_token
from gateway.price_like import borrowed_model
from gateway.provider import litellm_maps


@dataclass(frozen=True)
class Price:
    """USD per token in and out. ``model``: the litellm map entry the price came from (settled
    with litellm's cost functions); ``above``: litellm's long-prompt tiers, (prompt tokens
    past which, p_in, p_out), ascending."""

    input_per_token: float
    output_per_token: float
    model: str | None = field(default=None, compare=False)  # equal prices: equal rates
    above: tuple[tuple[int, float, float], ...] = ()
    service_tier: str | None = None  # a tier's price (``tier_price``), settled at that tier

    def rates(self, prompt_tokens: int) -> tuple[float, float]:
        """(p_in, p_out) for a prompt of ``prompt_tokens`` (never below the base rates)."""
        pin, pout = self.input_per_token, self.output_per_token
        for threshold, i, o in self.above:
            if prompt_tokens > threshold:
                pin, pout = max(pin, i), max(pout, o)
        return pin, pout

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        if not self.above:
            return prompt_tokens * self.input_per_token + completion_tokens * self.output_per_token
        pin, pout = self.rates(prompt_tokens)
        return prompt_tokens * pin + completion_tokens * pout

    def settle_cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """What an answer costs: litellm's ``cost_per_token`` for a map price, never more than
        ``cost`` (what the reservation bounded); ``cost`` for a config price."""
        bound = self.cost(prompt_tokens, completion_tokens)
        if self.model is None:
            return bound
        try:
            got = litellm_maps.cost_per_token(self.model, prompt_tokens, completion_tokens,
                                              self.service_tier)
        except Exception:  # noqa: BLE001 - litellm's look-up failing: the formula's price
            return bound
        # litellm answering 0 (or less) for tokens its map prices is no price: the formula's
        return min(got, bound) if got > 0 else bound

    def affordable_output_tokens(self, usd: float, prompt_tokens: int) -> int:
        """The largest n_out with n_prompt·p_in + n_out·p_out ≤ usd."""
        pin, pout = self.rates(prompt_tokens)
        left = usd - prompt_tokens * pin
        if left < 0:
            return 0
        if pout <= 0:
            return 1 << 30
        return int(left / pout)


_TIER = re.compile(r"^input_cost_per_token_above_(\d+)k_tokens$")


def _litellm_price(model: str) -> Price | None:
    info = litellm_maps.model_info(model)
    if info is None:
        return None
    pin, pout = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    if pin is None or pout is None:
        return None
    if not pin and not pout:  # 0/0: litellm's map answers it for a model it only half knows
        return None  # (claude-opus-4-1-20250805 in 1.110.2): no price, never a free model
    above = []
    for key, value in info.items():
        m = _TIER.match(key)
        if m and value is not None:
            out = info.get(f"output_cost_per_token_above_{m.group(1)}k_tokens")
            above.append((int(m.group(1)) * 1000, float(value),
                          float(out if out is not None else pout)))
    return Price(float(pin), float(pout), model, tuple(sorted(above)))


@functools.lru_cache(maxsize=1024)
def tier_price(price: Price, tier: str) -> Price | None:
    """``price`` at OpenAI-style ``service_tier`` ``tier`` (flex, priority, ...), from litellm's
    map: its ``input/output_cost_per_token_<tier>`` keys (the key named by litellm's own
    ``get_service_tier_cost_key``); None when the price is not litellm's or the map has no
    such rates. Reserved at the dearer of the standard and the tier rate, rate by rate (a
    provider serving the standard tier instead still fits the hold); settled by litellm's
    ``cost_per_token(service_tier=...)``, never above that."""
    if price.model is None:
        return None
    key = litellm_maps.service_tier_cost_key
    info = litellm_maps.model_info(price.model)
    if info is None:
        return None
    names = [key(f"{side}_cost_per_token", tier) for side in ("input", "output")]
    rates = [info.get(name) for name in names]
    if names == ["input_cost_per_token", "output_cost_per_token"] or None in rates:
        return None  # a tier litellm does not price, or not for this model
    pin, pout = (float(r) for r in rates)  # type: ignore[arg-type]
    above = tuple((t, max(i, pin), max(o, pout)) for t, i, o in price.above)
    return Price(max(price.input_per_token, pin), max(price.output_per_token, pout),
                 price.model, above, tier)


def dearest(prices: list[Price]) -> Price:
    """One price at least as dear as each of ``prices`` for any request, rate by rate (a
    group's reservation: whichever deployment answers, the hold covers it)."""
    if all(p == prices[0] for p in prices):
        return prices[0]
    thresholds = sorted({t for p in prices for t, _, _ in p.above})
    above = tuple((t, max(p.rates(t + 1)[0] for p in prices),
                   max(p.rates(t + 1)[1] for p in prices)) for t in thresholds)
    return Price(max(p.input_per_token for p in prices),
                 max(p.output_per_token for p in prices), None, above)


def deployment_prices(b: Backend) -> list[Price | None]:
    """The price of each deployment of ``b`` (None: neither model_info nor litellm's map has
    one); config prices for a model litellm lacks are registered with it."""
    out: list[Price | None] = []
    for params, info in zip(b.deployment_params(), b.deployment_infos(), strict=True):
        model = str(params["model"])
        pin = per_token(info.input_cost_per_token, info.input_cost_per_million)
        pout = per_token(info.output_cost_per_token, info.output_cost_per_million)
        base = borrowed_model(info)
        known = _litellm_price(str(base)) if base else None
        known = known or _litellm_price(model)
        if pin is not None and pout is not None:
            if known is None:
                _register(model, info, pin, pout)
            out.append(Price(float(pin), float(pout)))
        elif known is None:
            out.append(None)
        elif pin is None and pout is None:
            out.append(known)
        else:
            out.append(Price(float(known.input_per_token if pin is None else pin),
                             float(known.output_per_token if pout is None else pout)))
    return out


def resolve_prices(settings: Settings, strict: bool = True) -> dict[str, Price]:
    """Backend name -> the price its reservation takes (a group's dearest deployment);
    registers config prices with litellm for models it lacks.

    A backend with a deployment that has neither config prices nor a litellm price (for its
    base_model or model): budgets cannot be enforced on a model of unknown price, so
    ``strict`` raises ConfigError; otherwise it is left out (the gateway starts, warns, and
    neither routes nor forwards to it).
    """
    prices: dict[str, Price] = {}
    for b in settings.model_list:
        if b.is_wildcard:  # priced per concrete model a request names (Pool.concrete)
            continue
        each = deployment_prices(b)
        missing = [str(p["model"]) for p, price in zip(b.deployment_params(), each, strict=True)
                   if price is None]
        if missing and strict:
            raise ConfigError(
                f"backend {b.model_name!r}: no price in model_info and litellm does not "
                f"know {missing[0]!r}; set input/output_cost_per_million (or price_like)"
            )
        if not missing:
            prices[b.model_name] = dearest([p for p in each if p is not None])
    return prices


def _register(model: str, info: ModelInfo, pin: float, pout: float) -> None:
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    entry: dict[str, Any] = {
        "input_cost_per_token": pin,
        "output_cost_per_token": pout,
        "litellm_provider": provider,
        "mode": "chat",
        "max_output_tokens": info.max_output_tokens,
    }
    if info.max_input_tokens:
        entry["max_input_tokens"] = info.max_input_tokens
    litellm_maps.register_model(model, entry)
