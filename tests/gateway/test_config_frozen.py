"""Settings are a frozen value: loading builds them once (what it knows beside the mapping,
the ignored LiteLLM keys and the config's directory, included), and nothing writes to them
afterwards; a changed configuration is a changed copy."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.config import load_settings

CONFIG = """\
model_list:
  - model_name: a
    litellm_params: {model: openai/a}
    model_info: {input_cost_per_token: 1.0e-6, output_cost_per_token: 2.0e-6}
router_settings: {routing_strategy: latency-based-routing}
max_attempts: 2
"""


def test_loaded_settings_are_frozen_and_carry_what_loading_knew(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOLLGATE_DATABASE_URL", raising=False)
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    s = load_settings(path)
    assert s.config_dir == str(tmp_path.resolve())
    assert s.ignored_keys == ("router_settings.routing_strategy",)
    with pytest.raises(ValidationError, match="frozen"):
        s.max_attempts = 5
    with pytest.raises(ValidationError, match="frozen"):
        s.model_list = []
    assert s.max_attempts == 2 and [b.model_name for b in s.model_list] == ["a"]

    changed = s.model_copy(update={"max_attempts": 5})
    assert (changed.max_attempts, s.max_attempts) == (5, 2)
    assert changed.config_dir == s.config_dir and changed.ignored_keys == s.ignored_keys
