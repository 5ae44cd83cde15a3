"""``GET /v1/models`` and ``/v1/models/{id}`` never answer 500 (issue 34, item 7).

The repro: the packaged config with every backend renamed to ``openai/<name>``, which litellm
cannot price but for gpt-4o and gpt-4o-mini. The packaged router's rule for ``auto``'s 0.01 is
z = ∞ (the reference only), and ``JSONResponse`` refused it: "Out of range float values are not
JSON compliant", a 500 the SDK's ``models.list()`` raised on. A number that is not finite now
leaves as ``null``.

Real parts: uvicorn, the OpenAI SDK, SQLite, the packaged router and MiniLM; the backends
point at the local fake upstream.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import yaml

from gateway.config import DEFAULT_CONFIG_PATH, settings_from_dict
from gateway.serving.models_endpoint import json_safe
from router_core.artifact import load_router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, Gateway, run_gateway

RAW = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
NAMES = [e["model_name"] for e in RAW["model_list"]]


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    with FakeUpstream([FakeBackend(n) for n in NAMES]) as u:
        yield u


@pytest.fixture(scope="module")
def renamed(up: FakeUpstream, encoder, tmp_path_factory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("models_renamed")
    raw = dict(RAW)
    raw["model_list"] = [{"model_name": n, "litellm_params": {
        "model": f"openai/{n}", "api_base": up.base_url, "api_key": "sk-x"}} for n in NAMES]
    raw.update(database_url=f"sqlite:///{tmp / 'models.db'}", admin_key=ADMIN_KEY,
               reliability={"spool_dir": str(tmp / "spool")})
    raw.pop("retraining", None)
    yield from run_gateway(settings_from_dict(raw), load_router(), encoder)


def test_models_list_and_retrieve_answer_with_null_for_what_is_not_finite(
        renamed: Gateway) -> None:
    client = renamed.client(renamed.tenant()[0])
    listed = {m.id: m.model_extra["tollgate"] for m in client.models.list().data}
    assert {"auto", "auto-balanced", "auto-cheap"} <= set(listed) and set(NAMES) <= set(listed)
    auto = client.models.retrieve("auto").model_extra["tollgate"]
    assert auto["promise"]["max_drop"] == 0.01
    z = renamed.app.state.ctx.pool.current.promises["auto"].z
    assert auto["promise"]["z"] == (None if not math.isfinite(z) else z)
    unpriced = client.models.retrieve("claude-sonnet-4-6").model_extra["tollgate"]
    assert unpriced["known_as"] == "no price" and unpriced["input_cost_per_token"] is None


def test_json_safe_replaces_every_non_finite_float() -> None:
    out = json_safe({"a": math.inf, "b": [1.0, -math.inf, {"c": math.nan}], "d": (2, "x"),
                     "e": None, "f": True})
    assert out == {"a": None, "b": [1.0, None, {"c": None}], "d": [2, "x"], "e": None,
                   "f": True}
