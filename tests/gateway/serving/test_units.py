"""The pure parts of the HTTP side: embedded text, config validation, prices, error mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_settings, settings_from_dict
from gateway.pricing import Price, resolve_prices
from gateway.provider.litellm_errors import classify
from gateway.provider.litellm_transport import chat_kwargs, wire_params
from gateway.serving.plan.routing import embed_text
from router_core.env.litellm_env import litellm


def test_embedded_text_is_system_and_user_turns_keeping_the_end() -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "an answer that is not embedded"},
        {"role": "tool", "tool_call_id": "x", "content": "tool output, not embedded"},
        {"role": "user", "content": [{"type": "text", "text": "second"},
                                     {"type": "image_url", "image_url": {"url": "u"}}]},
    ]
    assert embed_text(messages, 4000) == "You are terse.\n\nfirst question\n\nsecond"
    assert embed_text(messages, 12) == "tion\n\nsecond"  # the oldest turns fall off first


def _entry(name: str, **info: object) -> dict:
    return {"model_name": name, "litellm_params": {"model": f"openai/{name}"},
            "model_info": info}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"model_list": [_entry("a"), _entry("a", max_output_tokens=5)]}, "differ in model_info"),
        ({"surprise": 1}, "unknown key 'surprise'"),
        ({"router_settings": {"num_retries": "two"}}, "router_settings.num_retries"),
        ({"model_list": [_entry("a")], "router_settings": {"fallbacks": [{"a": ["b"]}]}},
         r"fallbacks.a: \['b'\] not in model_list"),
        ({"model_list": [_entry("a")], "routes": {"r": {"models": ["b"]}}}, "unknown backends"),
        ({"model_list": [_entry("auto")]}, "share names"),
        ({"model_list": [_entry("a", input_cost_per_token=1, input_cost_per_million=1)]},
         "not both"),
        ({"model_list": [{"model_name": "a", "litellm_params": {}}]}, "litellm_params.model"),
        ({"routes": {"auto": {"cost_weight": -1}}}, "cost_weight"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_config_errors_name_the_problem(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_from_dict(raw)


def test_repository_config_loads_and_environment_overrides(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TOLLGATE_DATABASE_URL", "postgresql://u@h/db")
    monkeypatch.setenv("TOLLGATE_ADMIN_KEY", "adm")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    s = load_settings()
    assert s.database_url == "postgresql://u@h/db" and s.admin_key == "adm"
    assert s.backend("gpt-4o").call_params()["api_key"] == "sk-from-env"
    assert {"auto", "auto-balanced", "auto-cheap"} <= set(s.routes)
    prices = resolve_prices(s)  # litellm's cost map prices every backend of the pool
    assert set(prices) == {b.model_name for b in s.model_list}
    assert prices["gpt-4o"] == Price(2.5e-6, 10e-6)
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml")


def test_unpriced_unknown_backend_is_a_config_error() -> None:
    s = settings_from_dict({"model_list": [_entry("no-such-model-anywhere")]})
    with pytest.raises(ConfigError, match="no price"):
        resolve_prices(s)


def test_litellm_price_is_used_when_config_has_none() -> None:
    s = settings_from_dict({"model_list": [
        {"model_name": "g", "litellm_params": {"model": "gpt-4-1106-preview"}}]})
    assert resolve_prices(s)["g"] == Price(10e-6, 30e-6)


def test_affordable_output_tokens() -> None:
    p = Price(1e-6, 2e-6)
    # (B − n_prompt·p_in) / p_out
    assert p.affordable_output_tokens(0.001, 100) == int((0.001 - 100e-6) / 2e-6)
    assert p.affordable_output_tokens(0.00005, 100) == 0
    assert p.cost(100, p.affordable_output_tokens(0.001, 100)) <= 0.001


@pytest.mark.parametrize(
    ("exc", "status", "retryable"),
    [
        (TimeoutError(), 504, True),
        (litellm.RateLimitError("slow down", "openai", "m"), 429, True),
        (litellm.BadRequestError("bad", "m", "openai"), 400, False),
        (litellm.ContextWindowExceededError("too long", "m", "openai"), 400, True),
        (litellm.AuthenticationError("no", "openai", "m"), 502, True),
        (litellm.APIConnectionError("down", "openai", "m"), 502, True),
        (ValueError("Expecting value: line 1"), 502, True),
    ],
)
def test_upstream_failure_classification(exc: BaseException, status: int, retryable: bool
                                         ) -> None:
    f = classify(exc)
    assert (f.status, f.retryable) == (status, retryable)


def test_wire_params_cached_per_deployment_and_unmapped_params_go_in_extra_body() -> None:
    """The provider look-up is cached (bench/serving/forwarding_profile.py); what is sent is not
    changed: a parameter litellm does not map for an OpenAI-wire deployment rides in
    extra_body, other providers get litellm's mapping."""
    wire_params.cache_clear()
    supported = wire_params("openai/fake-cheap", "http://127.0.0.1:1/v1")
    assert supported is not None and "temperature" in supported
    assert wire_params("openai/fake-cheap", "http://127.0.0.1:1/v1") is supported
    assert wire_params.cache_info().hits == 1
    assert wire_params("anthropic/claude-3-5-haiku-latest", None) is None
    settings = settings_from_dict({"model_list": [{
        "model_name": "fake-cheap",
        "litellm_params": {"model": "openai/fake-cheap", "api_base": "http://127.0.0.1:1/v1"},
        "model_info": {"input_cost_per_million": 1.0, "output_cost_per_million": 2.0}}]})
    b = settings.backend("fake-cheap")
    for _ in range(2):  # the second call takes the cached look-up: the same arguments
        call = chat_kwargs(b, b.litellm_params, [{"role": "user", "content": "hi"}],
                       {"temperature": 0.5, "not_mapped": 1})
        assert call["temperature"] == 0.5 and call["extra_body"] == {"not_mapped": 1}
