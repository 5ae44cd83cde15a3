"""What the gateway reads from litellm besides calls: its model map (prices, modes, limits),
its cost and token functions, its provider names. Here so that no module outside
``gateway/provider/`` imports litellm (tests/gateway/test_layers.py); each function is
litellm's own, named for what the gateway asks of it. Importing this module loads litellm
(offline: router_core/env/litellm_env.py): modules that load it late import this one late.
"""

from __future__ import annotations

from typing import Any

from router_core.env.litellm_env import litellm


def loaded() -> None:
    """Nothing: importing this module has loaded litellm (its import attaches log handlers,
    which gateway/cli/log_setup.py then removes)."""


def model_info(name: str) -> dict[str, Any] | None:
    """litellm's map entry for ``name``; None when it lists none (litellm raises a bare
    Exception for an unknown model)."""
    try:
        return dict(litellm.get_model_info(name))
    except Exception:  # noqa: BLE001 - litellm's way of saying it does not know the model
        return None


def cost_per_token(model: str, prompt_tokens: int, completion_tokens: int,
                   service_tier: str | None) -> float:
    """litellm's ``cost_per_token`` (prompt plus completion USD); raises what litellm raises."""
    return float(sum(litellm.cost_per_token(model=model, prompt_tokens=prompt_tokens,
                                            completion_tokens=completion_tokens,
                                            service_tier=service_tier)))


def service_tier_cost_key(name: str, tier: str) -> str:
    """The map key of rate ``name`` at ``service_tier`` ``tier`` (litellm's own naming)."""
    return litellm.litellm_core_utils.llm_cost_calc.utils.get_service_tier_cost_key(name, tier)


def register_model(model: str, entry: dict[str, Any]) -> None:
    """Add ``model`` to litellm's map (its own calls then price and bound it)."""
    litellm.register_model({model: entry})


def encoded_tokens(model: str, text: str) -> int:
    """Tokens of ``text`` by the tokenizer litellm selects for ``model`` (``litellm.encode``);
    raises what litellm raises."""
    return len(litellm.encode(model=model, text=text))


def token_counter(model: str, text: str) -> int:
    """litellm's ``token_counter`` (zero once ``disable_token_counter`` is set)."""
    return int(litellm.token_counter(model=model, text=text))


def disable_token_counter() -> None:
    """Turn litellm's own per-answer token count off (gateway/cli/serve.py says why)."""
    litellm.disable_token_counter = True


def llm_provider(model: str, api_base: str | None = None) -> str:
    """The provider litellm calls ``model`` on; raises when it cannot place the model."""
    _, provider, _, _ = litellm.get_llm_provider(model, api_base=api_base)
    return str(provider)


def provider_names() -> list[str]:
    """The provider prefixes litellm knows, sorted."""
    return sorted({getattr(p, "value", str(p)) for p in litellm.provider_list})


def missing_keys(model: str) -> list[str]:
    """The environment variables litellm says ``model``'s provider needs and lacks; raises
    for a provider it does not know."""
    return list(litellm.validate_environment(model=model).get("missing_keys") or [])


def image_price(model: str, provider: str | None, quality: str | None, n: int, size: str,
                own: dict[str, Any] | None) -> float:
    """litellm's ``default_image_cost_calculator``; raises (a bare Exception) when unpriced."""
    return float(litellm.cost_calculator.default_image_cost_calculator(
        model=model, custom_llm_provider=provider, quality=quality, n=n, size=size,
        model_info=own))


async def mock_completion(model: str) -> None:
    """One offline completion (``mock_response``): litellm's lazy imports and setup paid."""
    await litellm.acompletion(model=model, messages=[{"role": "user", "content": "warm up"}],
                              mock_response="ok")
