"""Prices per backend, the predicted cost a request reserves, and the cost it settles.

Predicted cost (what the budget reserves before forwarding):
    ĉ = n_prompt · p_in + n_out_max · p_out
n_prompt from ``litellm.token_counter`` (offline tokenizer), n_out_max the request's
max_tokens (or the backend's max_output_tokens). Actual cost (what is settled):
    c = usage.prompt_tokens · p_in + usage.completion_tokens · p_out
Prices come from config.yaml; a backend without them takes litellm's bundled cost map.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config import Backend, ConfigError, Settings
from router_core.litellm_env import litellm


@dataclass(frozen=True)
class Price:
    input_per_token: float
    output_per_token: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return prompt_tokens * self.input_per_token + completion_tokens * self.output_per_token

    def affordable_output_tokens(self, usd: float, prompt_tokens: int) -> int:
        """The largest n_out with n_prompt·p_in + n_out·p_out ≤ usd."""
        left = usd - prompt_tokens * self.input_per_token
        if left < 0:
            return 0
        if self.output_per_token <= 0:
            return 1 << 30
        return int(left / self.output_per_token)


def _litellm_price(model: str) -> Price | None:
    try:
        info = litellm.get_model_info(model)
    except Exception:  # noqa: BLE001 - litellm raises a bare Exception for unknown models
        return None
    pin, pout = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    if pin is None or pout is None:
        return None
    return Price(float(pin), float(pout))


def resolve_prices(settings: Settings, strict: bool = True) -> dict[str, Price]:
    """Backend name -> price; registers config prices with litellm for models it lacks.

    A backend with neither config prices nor a litellm price: budgets cannot be enforced on
    a model of unknown price, so ``strict`` raises ConfigError; otherwise it is left out
    (the gateway starts, warns, and neither routes nor forwards to it).
    """
    prices: dict[str, Price] = {}
    for b in settings.model_list:
        pin, pout = b.input_cost_per_token, b.output_cost_per_token
        known = _litellm_price(b.litellm_model)
        if pin is None or pout is None:
            if known is None and not strict:
                continue
            if known is None:
                raise ConfigError(
                    f"backend {b.model_name!r}: no price in model_info and litellm does not "
                    f"know {b.litellm_model!r}; set input/output_cost_per_million"
                )
            pin = known.input_per_token if pin is None else pin
            pout = known.output_per_token if pout is None else pout
        elif known is None:
            _register(b, pin, pout)
        prices[b.model_name] = Price(float(pin), float(pout))
    return prices


def _register(b: Backend, pin: float, pout: float) -> None:
    provider = b.litellm_model.split("/", 1)[0] if "/" in b.litellm_model else "openai"
    entry: dict[str, Any] = {
        "input_cost_per_token": pin,
        "output_cost_per_token": pout,
        "litellm_provider": provider,
        "mode": "chat",
        "max_output_tokens": b.model_info.max_output_tokens,
    }
    if b.model_info.max_input_tokens:
        entry["max_input_tokens"] = b.model_info.max_input_tokens
    litellm.register_model({b.litellm_model: entry})


def count_prompt_tokens(
    backend: Backend, messages: list[dict], tools: list[dict] | None = None
) -> int:
    """Prompt tokens as the backend's tokenizer would count them (cl100k when unknown)."""
    try:
        return int(litellm.token_counter(model=backend.litellm_model, messages=messages,
                                         tools=tools or None))
    except Exception:  # noqa: BLE001 - a malformed message part: fall back to characters / 4
        text = " ".join(str(m.get("content", "")) for m in messages)
        return max(1, len(text) // 4)


def count_text_tokens(backend: Backend, text: str) -> int:
    """Tokens of streamed text (used when a stream ends without a usage chunk)."""
    if not text:
        return 0
    try:
        return int(litellm.token_counter(model=backend.litellm_model, text=text))
    except Exception:  # noqa: BLE001 - classified below
        return max(1, len(text) // 4)

