"""No backend is billed at $0 unless the config says 0 (issue 47.3).

litellm's map answers 0 in and 0 out for models it half knows (``claude-opus-4-1-20250805`` in
litellm 1.110.2, found by a pattern, not listed) and lists a few hundred chat and embedding
models at 0/0. Each of them, and every other model of the map, is either priced above 0 or
has no price (refused with 503 ``backend_unpriced``); only a config's own 0 prices at 0. Every
unit price (speech, transcription, moderation, rerank) and the cache-read ratio follow the
same rule. Pure: litellm's bundled map, no network.
"""

from __future__ import annotations

import pytest

from gateway.config import Backend, settings_from_dict
from gateway.pricing import deployment_prices, resolve_prices
from gateway.serving.messages.messages_handler import READ, cache_ratios
from gateway.serving.units.unit_prices import unit_price
from router_core.env.litellm_env import litellm

PRICED_MODES = ("chat", "completion", "responses", "embedding")


def _backend(model: str, **model_info: float) -> Backend:
    return Backend(model_name="b", litellm_params={"model": model}, model_info=model_info)


def _map_models(free: bool) -> list[str]:
    out = []
    for name, entry in litellm.model_cost.items():
        if entry.get("mode") not in PRICED_MODES or "*" in name:
            continue
        zero = not entry.get("input_cost_per_token") and not entry.get("output_cost_per_token")
        if zero == free:
            out.append(name)
    return sorted(out)


def test_every_model_the_map_lists_at_zero_has_no_price() -> None:
    free = _map_models(free=True)
    assert len(free) > 100  # the map does list such models: the test reads what it claims
    billed_free = [m for m in free if deployment_prices(_backend(m))[0] is not None]
    assert billed_free == []


def test_every_priced_model_of_the_map_is_priced_above_zero() -> None:
    """Each chat and embedding model the map prices: a positive rate, and a settled cost
    above 0 for an answer of tokens (never litellm's 0 for a model it half knows)."""
    zero = []
    for m in _map_models(free=False):
        price = deployment_prices(_backend(m))[0]
        if price is None:
            continue  # litellm's own look-up refuses it: no price, refused, never free
        if not (price.input_per_token > 0 or price.output_per_token > 0) \
                or price.settle_cost(10, 10) <= 0:
            zero.append(m)
    assert zero == []


def test_a_model_litellm_half_knows_at_zero_is_unpriced_and_the_configs_zero_is_free() -> None:
    half_known = "anthropic/claude-opus-4-1-20250805"
    info = litellm.get_model_info(half_known)
    assert info["input_cost_per_token"] == 0 and info["output_cost_per_token"] == 0
    settings = settings_from_dict({"model_list": [
        {"model_name": "opus", "litellm_params": {"model": half_known}},
        {"model_name": "house", "litellm_params": {"model": half_known},
         "model_info": {"input_cost_per_million": 0, "output_cost_per_million": 0}},
        {"model_name": "borrowed", "litellm_params": {"model": half_known},
         "model_info": {"price_like": "anthropic/claude-sonnet-4-5"}},
    ]})
    prices = resolve_prices(settings, strict=False)
    assert "opus" not in prices  # refused with 503 backend_unpriced
    assert prices["house"].input_per_token == 0 and prices["house"].output_per_token == 0
    assert prices["borrowed"].output_per_token > 0
    with pytest.raises(Exception, match="no price"):
        resolve_prices(settings, strict=True)


def test_a_unit_price_of_zero_from_the_map_is_no_price() -> None:
    """A speech model the map lists at 0 per character is refused unless the config says 0;
    moderation, which the map lists at 0 as OpenAI serves it, stays free."""
    speech = "openai/tts-zero"
    litellm.register_model({speech: {"input_cost_per_character": 0.0,
                                     "litellm_provider": "openai", "mode": "audio_speech"}})
    with pytest.raises(Exception, match="has no input_cost_per_character"):
        unit_price(_backend(speech), "audio_speech")
    own = Backend(model_name="b", litellm_params={"model": speech},
                  model_info={"input_cost_per_character": 0.0})
    assert unit_price(own, "audio_speech") == 0.0
    assert unit_price(_backend("openai/omni-moderation-latest"), "moderation") == 0.0


def test_a_cache_read_price_of_zero_from_the_map_is_no_discount() -> None:
    """A cache read is billed at the input price unless a price says otherwise: the map's 0
    is no price, the config's 0 is the operator's."""
    b = _backend("anthropic/claude-opus-4-1-20250805")
    assert cache_ratios(b)[READ] == 1.0
    own = _backend("anthropic/claude-opus-4-1-20250805", input_cost_per_token=1e-6,
                   cache_read_input_token_cost=0.0)
    assert cache_ratios(own)[READ] == 0.0
    sonnet = _backend("anthropic/claude-sonnet-4-5")
    assert cache_ratios(sonnet)[READ] == pytest.approx(0.1)
