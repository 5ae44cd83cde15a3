"""Planning without HTTP: a parsed request, the pool (settings, prices, the router) and Φ(x)
in, a frozen ``Plan`` out. The router is tests/gateway/router_fixture.py's (flat calibration: the
ranking depends only on λ and the prices, whatever Φ(x) is)."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace
from typing import Any

import numpy as np
import pytest

from gateway.config import Settings, settings_from_dict
from gateway.errors import GatewayError
from gateway.pool import build_pool
from gateway.pricing import Price, resolve_prices
from gateway.serving.plan.planning import (
    PASSTHROUGH_VERSION,
    Plan,
    admissible,
    deployable,
    expected_cost,
    passthrough_backend,
    ranked,
    start_plan,
)
from gateway.serving.request.chat_request import parse_chat_request
from gateway.store.policy import TenantPolicy
from gateway.store.records import Tenant
from router_core.runtime.router import Router
from tests.gateway.router_fixture import PRICES, VERSION, build_router

MSG = [{"role": "user", "content": "Tell me something useful"}]
PROMPT_TOKENS = 12
ROUTES = {"auto": {"cost_weight": 0.5}, "best": {"cost_weight": 0.0},
          "cheap": {"cost_weight": 5.0}, "no-strong": {"models": ["fake-mid", "fake-cheap"]}}


def _settings(**info: dict[str, Any]) -> Settings:
    """The three fake backends with their prices (``info`` adds model_info per backend)."""
    entries = [{"model_name": n,
                "litellm_params": {"model": f"openai/{n}", "api_base": "http://127.0.0.1:9"},
                "model_info": {"input_cost_per_million": pin, "output_cost_per_million": pout,
                               **info.get(n.replace("-", "_"), {})}}
               for n, (pin, pout) in PRICES.items()]
    return settings_from_dict({"model_list": entries, "routes": ROUTES})


@pytest.fixture(scope="module")
def settings() -> Settings:
    return _settings()


@pytest.fixture(scope="module")
def prices(settings: Settings) -> dict[str, Price]:
    return resolve_prices(settings)


@pytest.fixture(scope="module")
def router() -> Router:
    return build_router()


def _tenant(**policy: Any) -> Tenant:
    return Tenant(id="t1", name="t1", budget_usd=None, period="total",
                  policy=TenantPolicy.parse(policy))


def _plan(settings: Settings, prices: dict[str, Price], router: Router, model: str = "auto",
          policy: dict | None = None, **body: Any) -> Plan:
    """Plan a request as plan_request does, with a fixed Φ(x) and prompt-token count."""
    req = parse_chat_request({"model": model, "messages": MSG, **body})
    plan = start_plan(build_pool(settings, prices, router), _tenant(**(policy or {})), req)
    if plan.route is None:
        backend = passthrough_backend(plan)
        plan = replace(plan, candidates=(backend.model_name,), prompt_tokens=PROMPT_TOKENS)
        return admissible(plan)
    phi = np.random.default_rng(0).normal(size=(1, 384)).astype(np.float32)
    return admissible(ranked(plan, deployable(plan), phi, PROMPT_TOKENS))


@pytest.mark.parametrize(("route", "lam", "first"), [
    ("auto", 0.5, "fake-mid"), ("best", 0.0, "fake-strong"), ("cheap", 5.0, "fake-cheap")])
def test_a_route_ranks_its_pool_by_lambda(settings: Settings, prices: dict[str, Price],
                                          router: Router, route: str, lam: float,
                                          first: str) -> None:
    plan = _plan(settings, prices, router, route)
    assert plan.route == route and plan.lam == lam and plan.router_version == VERSION
    assert plan.candidates[0] == first and set(plan.candidates) == set(PRICES)
    assert plan.routed is not None and plan.routed.backends == plan.candidates
    assert plan.prompt_tokens == PROMPT_TOKENS and plan.phi is not None
    with pytest.raises(FrozenInstanceError):
        plan.lam = 1.0  # type: ignore[misc]


def test_lambda_comes_from_request_then_policy_then_route_within_the_policy_bounds(
    settings: Settings, prices: dict[str, Price], router: Router
) -> None:
    def lam(policy: dict, **tollgate: Any) -> float | None:
        body = {"tollgate": tollgate} if tollgate else {}
        return _plan(settings, prices, router, "auto", policy, **body).lam

    assert lam({}) == 0.5
    assert lam({"cost_weight": 2.0}) == 2.0
    assert lam({"cost_weight": 2.0}, cost_weight=0.1) == 0.1
    assert lam({"min_cost_weight": 1.0}, cost_weight=0.1) == 1.0
    assert lam({"max_cost_weight": 0.2}) == 0.2


def test_allowed_backends_are_route_and_policy_and_request(
    settings: Settings, prices: dict[str, Price], router: Router
) -> None:
    plan = _plan(settings, prices, router, "auto", {"allowed_models": ["fake-cheap", "fake-strong"]},
                 tollgate={"allowed_models": ["fake-strong", "fake-mid"]})
    assert plan.candidates == ("fake-strong",)
    assert set(_plan(settings, prices, router, "no-strong").candidates) == {"fake-mid",
                                                                            "fake-cheap"}
    for policy, asked in ((None, ["nope"]), ({"allowed_models": ["fake-cheap"]}, ["fake-mid"])):
        with pytest.raises(GatewayError) as e:
            _plan(settings, prices, router, "auto", policy,
                  tollgate={"allowed_models": asked})
        assert e.value.status == 400 and e.value.param == "tollgate.allowed_models"


def test_the_cost_cap_is_the_tighter_of_request_and_policy(
    settings: Settings, prices: dict[str, Price], router: Router
) -> None:
    strong = expected_cost(_plan(settings, prices, router, "best"), settings.backend("fake-strong"),
                           settings.routing_output_tokens)
    plan = _plan(settings, prices, router, "best", {"max_cost_usd": strong / 2},
                 tollgate={"max_cost_usd": 1.0})
    assert plan.max_cost_usd == strong / 2
    assert plan.candidates[0] != "fake-strong"  # over the cap: not chosen
    with pytest.raises(GatewayError) as e:
        _plan(settings, prices, router, "best", tollgate={"max_cost_usd": 1e-12})
    assert e.value.status == 400 and e.value.param == "tollgate.max_cost_usd"


def test_passthrough_is_one_candidate_the_policy_must_allow(
    settings: Settings, prices: dict[str, Price], router: Router
) -> None:
    plan = _plan(settings, prices, router, "fake-strong")
    assert plan.route is None and plan.lam is None and plan.routed is None
    assert plan.candidates == ("fake-strong",) and plan.router_version == PASSTHROUGH_VERSION
    for model, policy in (("gpt-99", None), ("fake-strong", {"allowed_models": ["fake-mid"]})):
        with pytest.raises(GatewayError) as e:
            _plan(settings, prices, router, model, policy)
        assert e.value.status == 404 and e.value.code == "model_not_found"
    with pytest.raises(GatewayError) as e:
        _plan(settings, prices, router, "fake-strong", tollgate={"max_cost_usd": 1e-9})
    assert e.value.status == 400 and e.value.param == "tollgate.max_cost_usd"


def test_candidates_that_cannot_hold_the_request_are_dropped(
    prices: dict[str, Price], router: Router
) -> None:
    small = _settings(fake_mid={"max_input_tokens": PROMPT_TOKENS - 1},
                      fake_cheap={"max_output_tokens": 100})
    plan = _plan(small, prices, router, "auto", max_tokens=200)
    assert plan.candidates == ("fake-strong",)  # mid's window and cheap's output cap too small
    with pytest.raises(GatewayError) as e:
        _plan(small, prices, router, "fake-mid")
    assert e.value.status == 400 and e.value.code == "context_length_exceeded"


def test_expected_cost_is_the_typical_answer_and_the_cap_the_worst(
    settings: Settings, prices: dict[str, Price], router: Router
) -> None:
    mid, price = settings.backend("fake-mid"), prices["fake-mid"]
    plan = _plan(settings, prices, router, "fake-mid", max_tokens=10, n=2)
    assert plan.n == 2 and plan.output_cap(mid) == 10
    assert expected_cost(plan, mid, 256) == price.cost(PROMPT_TOKENS, 2 * 10)
    plan = _plan(settings, prices, router, "fake-mid")
    assert plan.output_cap(mid) == mid.model_info.max_output_tokens == 4096
    assert expected_cost(plan, mid, 256) == price.cost(PROMPT_TOKENS, 256)
