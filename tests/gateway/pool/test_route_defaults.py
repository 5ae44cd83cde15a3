"""Every route keeps a promise unless the operator asks for a λ route (issue 34, item 3)."""

from __future__ import annotations

from gateway.cli.startup import DEFAULT_ROUTES_NOTE, promise_lines
from gateway.config import settings_from_dict
from gateway.pool import build_pool
from gateway.pricing import Price
from tests.gateway.router_fixture import PRICES, build_router

MODEL_LIST = [{"model_name": n, "litellm_params": {"model": f"openai/{n}"},
               "model_info": {"input_cost_per_million": i, "output_cost_per_million": o}}
              for n, (i, o) in PRICES.items()]
PRICED = {n: Price(i * 1e-6, o * 1e-6) for n, (i, o) in PRICES.items()}


def test_a_config_without_routes_gets_three_promises() -> None:
    s = settings_from_dict({"model_list": MODEL_LIST})
    assert s.routes_by_default
    assert {n: r.max_drop for n, r in s.routes.items()} == {
        "auto": 0.01, "auto-balanced": 0.03, "auto-cheap": 0.06}
    assert all(r.promise_by_default for r in s.routes.values())
    lines = promise_lines(build_pool(s, PRICED, build_router()))
    assert lines[0] == DEFAULT_ROUTES_NOTE
    assert "auto: realized quality within 0.01 of fake-strong" in lines[1]
    assert not any("no promise" in line for line in lines)


def test_only_cost_weight_without_max_drop_makes_a_lambda_route() -> None:
    s = settings_from_dict({"model_list": MODEL_LIST, "routes": {
        "lam": {"cost_weight": 2.0},
        "both": {"cost_weight": 2.0, "max_drop": 0.05},
        "auto-cheap": {"description": "named, nothing else"},
        "code": {"models": ["fake-mid", "fake-cheap"], "explore_share": 0.2},
    }})
    assert not s.routes_by_default
    drops = {n: (r.max_drop, r.promise_by_default) for n, r in s.routes.items()}
    assert drops == {"lam": (None, False), "both": (0.05, False), "auto-cheap": (0.06, True),
                     "code": (0.01, True)}
    lines = promise_lines(build_pool(s, PRICED, build_router()))
    assert "lam: cost_weight 2 (λ route, no promise)" in lines
    assert any(line.startswith("code: explore_share ignored") for line in lines)
    assert DEFAULT_ROUTES_NOTE not in lines
