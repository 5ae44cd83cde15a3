"""The ``retraining:`` section is typed (gateway/config/retraining.py): a key it does not know
is a config error naming the key, values are checked at load, and learning from traffic is
on by default, bounded by a share of each route's spend."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, settings_from_dict

POOL = [{"model_name": "a", "litellm_params": {"model": "openai/a"},
         "model_info": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}}]


def _load(retraining: dict) -> object:
    return settings_from_dict({"model_list": POOL, "retraining": retraining})


@pytest.mark.parametrize("section, key", [
    ({"min_obervations": 10}, "min_obervations"),
    ({"exploration": {"epsilom": 0.2}}, "epsilom"),
    ({"exploration": {"judge": {"modle": "a"}}}, "modle"),
])
def test_a_typod_key_is_a_clear_config_error(section: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key) as e:
        _load(section)
    assert "retraining" in str(e.value)


@pytest.mark.parametrize("section, words", [
    ({"poll_s": 0}, "poll_s"),
    ({"exploration": {"epsilon": 1.5}}, "epsilon"),
    ({"exploration": {"max_share": 2.0}}, "max_share"),
    ({"exploration": {"period": "hourly"}}, "period"),
    ({"exploration": {"judge": {"kind": "human"}}}, "kind"),
])
def test_a_bad_value_is_refused_at_load(section: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        _load(section)


def test_the_typed_values_reach_the_settings_and_learning_is_on_by_default() -> None:
    s = _load({"poll_s": 0.5, "interval_s": 60, "margin": 0.01, "store_prompt_text": True,
               "refine_priors_s": None, "exploration": {"epsilon": {"auto": 0.2}}})
    r = s.retraining  # type: ignore[attr-defined]
    assert (r.poll_s, r.interval_s, r.margin, r.store_prompt_text, r.refine_priors_s) == (
        0.5, 60.0, 0.01, True, None)
    assert r.exploration.epsilon_for("auto") == 0.2 and r.exploration.epsilon_for("x") == 0.0
    default = settings_from_dict({"model_list": POOL}).retraining.exploration
    # on, within 5% of each route's spend, no absolute cap, the judge chosen from the pool
    assert (default.enabled, default.max_share, default.budget_usd, default.judge.model) == (
        True, 0.05, None, None)
    off = _load({"exploration": {"enabled": False}}).retraining.exploration  # type: ignore
    assert off.enabled is False
