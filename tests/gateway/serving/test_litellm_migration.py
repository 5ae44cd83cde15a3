"""A LiteLLM Proxy config's prices, aliases, wildcards and callbacks, through a real gateway.

Prices as LiteLLM computes them: a deployment priced from litellm's map for its
``model_info.base_model`` (an Azure deployment named after itself), a group whose deployments
have different prices (reserved at the dearest, settled at the answering deployment's).

Aliases and wildcards: ``router_settings.model_group_alias`` (both of LiteLLM's forms) resolves
a requested name before policy and fallbacks; a wildcard group (``openai/*``) forwards any
model of the provider, priced per concrete model from litellm's map, an unpriced one refused,
never routed by ``auto``.

Callbacks: ``litellm_settings.callbacks`` / ``success_callback`` handed to litellm at startup
(a ``CustomLogger`` referenced as ``module.instance`` beside the config file sees the request;
a name litellm cannot set up here is left out and named), litellm's lists restored on stop.

Real parts: uvicorn, the OpenAI SDK, litellm over HTTP to the fake upstream, SQLite.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from gateway.cli.startup import backend_lines, summary
from gateway.config import ConfigError, load_settings, settings_from_dict
from gateway.pool import build_pool
from gateway.pool.pool import WILDCARD_STATUS
from gateway.pricing import Price, resolve_prices
from gateway.provider import litellm_callbacks
from router_core.env.litellm_env import litellm
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, Gateway, run_gateway

CHEAP, DEAR = (1.0, 2.0), (10.0, 20.0)  # USD per 1M tokens in/out of the pair's deployments
AZURE = "azure/gpt-4o"  # litellm's map prices it


def _entry(up: FakeUpstream, name: str, model_name: str | None = None, **info: Any) -> dict:
    e = up.model_entry(name, model_name=model_name)
    e["model_info"] = info
    return e


def migration_config(up: FakeUpstream, tmp: Path) -> dict[str, Any]:
    return {
        "model_list": [
            _entry(up, "fake-azure", base_model=AZURE),  # no price of its own
            _entry(up, "fake-cheap", model_name="pair", input_cost_per_million=CHEAP[0],
                   output_cost_per_million=CHEAP[1]),
            _entry(up, "fake-dear", model_name="pair", input_cost_per_million=DEAR[0],
                   output_cost_per_million=DEAR[1]),
            {"model_name": "openai/*", "litellm_params": {
                "model": "openai/*", "api_base": up.base_url, "api_key": "sk-fake"}},
        ],
        "routes": {"auto": {"cost_weight": 0.5}},
        "router_settings": {"model_group_alias": {
            "gpt-4": "fake-azure", "old-pair": {"model": "pair", "hidden": True}}},
        "general_settings": {"master_key": ADMIN_KEY,
                             "database_url": f"sqlite:///{tmp / 'm.db'}"},
        "reliability": {"spool_dir": str(tmp / "spool")},
    }


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    with FakeUpstream([FakeBackend("fake-azure", reply="from azure"),
                       FakeBackend("fake-cheap", reply="cheap deployment"),
                       FakeBackend("fake-dear", reply="dear deployment"),
                       FakeBackend("gpt-4o-mini", reply="mini via the wildcard"),
                       FakeBackend("no-such-model-xyz", reply="never")]) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder: Any) -> Iterator[Gateway]:
    cfg = migration_config(up, tmp_path_factory.mktemp("migration"))
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def test_base_model_and_per_deployment_prices_resolve(up: FakeUpstream, tmp_path: Path) -> None:
    azure = {"model_name": "prod-gpt-4o", "model_info": {"base_model": AZURE},
             "litellm_params": {"model": "azure/my-prod-deployment", "api_base": "https://x"}}
    settings = settings_from_dict({"model_list": [azure]})
    info = litellm.get_model_info(AZURE)
    price = resolve_prices(settings)["prod-gpt-4o"]
    assert (price.input_per_token, price.output_per_token) == (
        info["input_cost_per_token"], info["output_cost_per_token"])
    assert price.model == AZURE  # settled by litellm's cost_per_token for the base model
    # a group's deployments may differ in price (no longer a config error): the dearest holds
    settings = settings_from_dict(migration_config(up, tmp_path))
    prices = resolve_prices(settings)
    assert prices["pair"] == Price(DEAR[0] / 1e6, DEAR[1] / 1e6)


def test_settlement_uses_litellm_cost_function_within_the_bound() -> None:
    price = Price(1e-6, 2e-6, "gpt-4o", above=((1000, 5e-6, 6e-6),))
    # litellm's gpt-4o price is dearer than this made-up one: settlement never passes the
    # formula at the rates the reservation used
    assert price.settle_cost(100, 10) == pytest.approx(price.cost(100, 10))
    assert price.rates(2000) == (5e-6, 6e-6) and price.cost(2000, 0) == pytest.approx(0.01)
    real = resolve_prices(settings_from_dict({"model_list": [
        {"model_name": "g", "litellm_params": {"model": "openai/gpt-4o-mini"}}]}))["g"]
    assert real.settle_cost(1000, 100) == pytest.approx(
        sum(litellm.cost_per_token(model="openai/gpt-4o-mini", prompt_tokens=1000,
                                   completion_tokens=100)))


def test_an_azure_base_model_group_is_priced_and_answers(gw: Gateway) -> None:
    pool = gw.app.state.ctx.pool.current
    assert pool.known["fake-azure"].status != "no price"
    key, _ = gw.tenant(budget_usd=1.0)
    raw = gw.client(key).chat.completions.with_raw_response.create(
        model="fake-azure", messages=[{"role": "user", "content": "hi"}], max_tokens=10)
    resp = raw.parse()
    assert resp.choices[0].message.content == "from azure"
    want = sum(litellm.cost_per_token(model=AZURE, prompt_tokens=resp.usage.prompt_tokens,
                                      completion_tokens=resp.usage.completion_tokens))
    assert float(raw.headers["x-tollgate-cost-usd"]) == pytest.approx(want)


def test_a_group_reserves_at_the_dearest_and_settles_at_the_answering_deployment(
        gw: Gateway) -> None:
    key, _ = gw.tenant(budget_usd=1.0)
    client = gw.client(key)
    seen: dict[str, int] = {}
    for _ in range(24):
        raw = client.chat.completions.with_raw_response.create(
            model="pair", messages=[{"role": "user", "content": "hi"}], max_tokens=10)
        resp = raw.parse()
        text = resp.choices[0].message.content
        p_in, p_out = CHEAP if text == "cheap deployment" else DEAR
        u = resp.usage
        cost = float(raw.headers["x-tollgate-cost-usd"])
        assert cost == pytest.approx((u.prompt_tokens * p_in + u.completion_tokens * p_out) / 1e6)
        row = gw.log_row(raw.headers["x-tollgate-request-id"])
        # the hold was taken at the dear deployment's price, whichever answered
        assert row["reserved_usd"] >= (u.prompt_tokens * DEAR[0] + 10 * DEAR[1]) / 1e6
        seen[text] = seen.get(text, 0) + 1
    assert set(seen) == {"cheap deployment", "dear deployment"}  # P(miss) = 2·2^-24


def test_the_pool_knows_each_deployments_price(gw: Gateway, encoder: Any) -> None:
    pool = gw.app.state.ctx.pool.current
    assert pool.answer_price("pair", 0) == Price(CHEAP[0] / 1e6, CHEAP[1] / 1e6)
    assert pool.answer_price("pair", 1) == pool.answer_price("pair", None) == pool.prices["pair"]
    again = build_pool(pool.settings, pool.prices, pool.router)
    assert again.deployment_prices == pool.deployment_prices


def _hi(client: openai.OpenAI, model: str) -> Any:
    return client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=10)


def test_alias_forms_map_and_are_checked(up: FakeUpstream, tmp_path: Path) -> None:
    s = settings_from_dict(migration_config(up, tmp_path))
    assert s.model_group_alias == {"gpt-4": "fake-azure", "old-pair": "pair"}
    assert "router_settings.model_group_alias" not in s.ignored_keys
    top = settings_from_dict({**migration_config(up, tmp_path),
                              "model_group_alias": {"g": {"model": "auto"}}})
    assert top.model_group_alias == {"g": "auto"}  # the top-level key wins, a route allowed
    with pytest.raises(ConfigError, match="model_group_alias.x: 'nope' is not in model_list"):
        settings_from_dict({**migration_config(up, tmp_path),
                            "router_settings": {"model_group_alias": {"x": "nope"}}})
    with pytest.raises(ConfigError, match="already a model_list name"):
        settings_from_dict({**migration_config(up, tmp_path),
                            "router_settings": {"model_group_alias": {"pair": "fake-azure"}}})


def test_an_alias_reaches_its_backend_and_policy_sees_the_resolved_name(gw: Gateway) -> None:
    key, _ = gw.tenant(policy={"allowed_models": ["fake-azure"]})
    client = gw.client(key)
    raw = _hi(client, "gpt-4")
    assert raw.parse().choices[0].message.content == "from azure"
    assert raw.headers["x-tollgate-model"] == "fake-azure"
    with pytest.raises(openai.NotFoundError):  # old-pair is pair, which the tenant may not use
        _hi(client, "old-pair")
    key, _ = gw.tenant()
    assert _hi(gw.client(key), "old-pair").headers["x-tollgate-model"] == "pair"


def test_a_wildcard_forwards_any_model_priced_per_model_and_is_never_routed(
        gw: Gateway, up: FakeUpstream) -> None:
    pool = gw.app.state.ctx.pool.current
    assert pool.known["openai/*"].status == WILDCARD_STATUS
    assert "openai/*" not in pool.deployable("auto").values() and "openai/*" not in pool.prices
    assert any("openai/*" in line and "wildcard" in line for line in backend_lines(pool))
    key, _ = gw.tenant(budget_usd=1.0)
    client = gw.client(key)
    raw = _hi(client, "openai/gpt-4o-mini")
    resp = raw.parse()
    assert resp.choices[0].message.content == "mini via the wildcard"
    assert up.requests_for("gpt-4o-mini")[-1]["model"] == "gpt-4o-mini"
    want = sum(litellm.cost_per_token(model="openai/gpt-4o-mini",
                                      prompt_tokens=resp.usage.prompt_tokens,
                                      completion_tokens=resp.usage.completion_tokens))
    assert float(raw.headers["x-tollgate-cost-usd"]) == pytest.approx(want) and want > 0
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert row["chosen_model"] == "openai/gpt-4o-mini" and row["status"] == 200
    with pytest.raises(openai.InternalServerError) as e:  # litellm has no price for it
        _hi(client, "openai/no-such-model-xyz")
    assert e.value.status_code == 503 and e.value.body["code"] == "backend_unpriced"
    assert "wildcard 'openai/*'" in e.value.body["message"]
    assert not up.requests_for("no-such-model-xyz")
    with pytest.raises(openai.NotFoundError):  # the pattern itself is not a model
        _hi(client, "openai/*")
    with pytest.raises(openai.NotFoundError):  # another provider: no wildcard matches
        _hi(client, "anthropic/claude-3-haiku")
    key, _ = gw.tenant(policy={"allowed_models": ["openai/*"]})  # the pattern allows its models
    assert _hi(gw.client(key), "openai/gpt-4o-mini").parse().choices[0].message.content


CALLBACK_MODULE = """
from litellm.integrations.custom_logger import CustomLogger


class Recorder(CustomLogger):
    def __init__(self):
        super().__init__()
        self.success, self.failure = [], []

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        self.success.append(kwargs.get("model"))

    async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
        self.failure.append(kwargs.get("model"))


handler = Recorder()
"""


@pytest.fixture(scope="module")
def cb_gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
          encoder: Any) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("callbacks")
    (tmp / "tg_test_callbacks.py").write_text(CALLBACK_MODULE)
    cfg = migration_config(up, tmp)
    cfg["litellm_settings"] = {"callbacks": ["tg_test_callbacks.handler"],
                               "success_callback": ["lunary"]}  # lunary: not installed here
    (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
    before = list(litellm.callbacks)
    yield from run_gateway(load_settings(tmp / "config.yaml"), test_router, encoder)
    assert litellm.callbacks == before  # restored when the gateway stopped


def test_callbacks_are_handed_to_litellm_and_see_the_request(cb_gw: Gateway) -> None:
    import tg_test_callbacks  # imported by the gateway from the config's directory

    s = cb_gw.settings
    assert s.litellm_callbacks == {"callbacks": ["tg_test_callbacks.handler"],
                                   "success_callback": ["lunary"]}
    assert not any("callback" in k for k in s.ignored_keys)
    handler = tg_test_callbacks.handler
    assert handler in litellm.callbacks and "lunary" not in litellm.success_callback
    ctx = cb_gw.app.state.ctx
    lines = summary(Path("config.yaml"), s, ctx.pool.current, "http://x")
    text = "\n".join(lines)
    assert "callbacks: tg_test_callbacks.handler" in text and "lunary (left out:" in text
    key, _ = cb_gw.tenant()
    _hi(cb_gw.client(key), "fake-azure")
    deadline = time.monotonic() + 10
    while not handler.success and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handler.success and "fake-azure" in handler.success[-1]


def test_a_callback_that_cannot_be_imported_is_a_config_error(up: FakeUpstream,
                                                              tmp_path: Path) -> None:
    cfg = migration_config(up, tmp_path)
    cfg["litellm_settings"] = {"callbacks": ["no_such_module_here.handler"]}
    s = settings_from_dict(cfg)
    with pytest.raises(ConfigError, match="litellm_settings.callbacks: cannot load"):
        litellm_callbacks.resolve(s)
    with pytest.raises(ConfigError, match="litellm_settings.callbacks"):
        settings_from_dict({**cfg, "litellm_settings": {"callbacks": [3]}})
