"""LiteLLM's config sections and groups, read by config.py: what maps where, what is named
as ignored, and how a bad value is reported (one line naming the key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_settings, settings_from_dict


def _entry(name: str, model: str, **params: object) -> dict:
    return {"model_name": name, "litellm_params": {"model": model, **params},
            "model_info": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}}


def test_sections_map_onto_tollgate_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOLLGATE_ADMIN_KEY", raising=False)
    monkeypatch.delenv("TOLLGATE_DATABASE_URL", raising=False)
    monkeypatch.setenv("LITELLM_MASTER_KEY", "sk-from-env")
    monkeypatch.setenv("REDIS_HOST", "cache.internal")
    s = settings_from_dict({
        "model_list": [_entry("a", "openai/a", timeout=5), _entry("b", "openai/b")],
        "router_settings": {"num_retries": 0, "allowed_fails": 2, "cooldown_time": 7,
                            "redis_host": "os.environ/REDIS_HOST", "redis_port": 6380,
                            "redis_password": "pw", "routing_strategy": "latency-based-routing"},
        "litellm_settings": {"drop_params": True, "request_timeout": 42, "cache": True},
        "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY",
                             "database_url": "postgresql://u@db/x", "store_model_in_db": True},
        "environment_variables": {"X": "1"},
    })
    assert s.admin_key == "sk-from-env" and s.database_url == "postgresql://u@db/x"
    assert s.max_attempts == 1
    assert (s.reliability.circuit.failure_threshold, s.reliability.circuit.cooldown_s) == (3, 7)
    assert s.reliability.redis_url == "redis://:pw@cache.internal:6380/0"
    assert s.drop_params and all(b.call_params()["drop_params"] for b in s.model_list)
    assert s.backend("b").model_info.timeout == 42  # request_timeout fills what is unset
    assert s.ignored_keys == ("environment_variables", "router_settings.routing_strategy",
                              "general_settings.store_model_in_db")
    assert s.cache.enabled and s.cache.type == "local"  # LiteLLM's default cache type


def test_litellm_cache_params_become_the_cache_section(monkeypatch: pytest.MonkeyPatch) -> None:
    """cache_params: redis by host/port/password or url, ttl, namespace; a type Tollgate does
    not serve (s3, semantic caches) and unknown keys are named at startup, the cache off."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    s = settings_from_dict({"litellm_settings": {"cache": True, "cache_params": {
        "type": "redis", "host": "r.internal", "port": 6390, "password": "pw", "ttl": 30,
        "namespace": "team-a", "supported_call_types": ["acompletion"]}}})
    assert (s.cache.enabled, s.cache.type, s.cache.ttl_s, s.cache.namespace) == (
        True, "redis", 30, "team-a")
    assert s.cache.redis_url == "redis://:pw@r.internal:6390/0"
    assert s.ignored_keys == ("litellm_settings.cache_params.supported_call_types",)
    s = settings_from_dict({"litellm_settings": {"cache": True, "cache_params": {
        "type": "redis", "url": "redis://u.internal:1/2", "default_in_redis_ttl": 5}}})
    assert (s.cache.redis_url, s.cache.ttl_s) == ("redis://u.internal:1/2", 5)
    s = settings_from_dict({"litellm_settings": {"cache": True,
                                                 "cache_params": {"type": "s3"}}})
    assert not s.cache.enabled and "caching is off" in s.ignored_keys[0]
    with pytest.raises(ValueError, match="cache_params.ttl"):
        settings_from_dict({"litellm_settings": {"cache": True, "cache_params": {"ttl": -1}}})


def test_tollgate_keys_win_over_litellm_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOLLGATE_ADMIN_KEY", raising=False)
    s = settings_from_dict({"admin_key": "mine", "max_attempts": 5,
                            "general_settings": {"master_key": "theirs"},
                            "router_settings": {"num_retries": 1}})
    assert (s.admin_key, s.max_attempts) == ("mine", 5)


def test_a_group_is_one_backend_with_its_deployments() -> None:
    s = settings_from_dict({"model_list": [
        _entry("g", "openai/x", weight=2, rpm=10), _entry("g", "azure/x", api_base="https://a"),
        _entry("solo", "openai/y")]})
    assert [b.model_name for b in s.model_list] == ["g", "solo"]
    g = s.backend("g")
    assert [d["model"] for d in g.deployment_params()] == ["openai/x", "azure/x"]
    assert "weight" not in g.call_params() and "rpm" not in g.call_params()  # router-only
    assert s.backend("solo").deployment_params() == [s.backend("solo").litellm_params]


@pytest.mark.parametrize(("text", "message"), [
    ("model_list: [\n  {model_name: a\n", "line 3: not valid YAML"),
    ("model_list:\n  - model_name: a\n", "model_list.0.litellm_params: Field required"),
    ("general_settings: [1]\n", "general_settings: must be a mapping"),
    ("router_settings: {cooldown_time: -5}\n",
     "reliability.circuit.cooldown_s (from router_settings.cooldown_time): Input should be"),
    ("general_settings: {master_key: [1]}\n", "admin_key (from general_settings.master_key)"),
])
def test_a_config_error_is_one_line_naming_the_place(tmp_path: Path, text: str,
                                                      message: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_startup_block_says_how_responses_are_cached() -> None:
    from gateway.cli.startup import cache_line

    s = settings_from_dict({"litellm_settings": {"cache": True, "cache_params": {
        "type": "redis", "url": "redis://:secret@r.internal:6390/0", "ttl": 30}}})
    line = cache_line(s)
    assert line.startswith("redis ") and "r.internal:6390" in line and "secret" not in line
    assert "ttl 30s" in line
    assert cache_line(settings_from_dict({})).startswith("off")
    assert cache_line(settings_from_dict({"cache": {"enabled": True}})).startswith("local")
